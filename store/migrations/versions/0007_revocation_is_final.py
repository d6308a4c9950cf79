"""A revoked API key stays revoked.

The application role may set ``api_keys.revoked_at`` (revocation goes through it), and so
could set it back to NULL, bringing a revoked key, perhaps a leaked one, back to life. A
trigger makes the first revocation final for every role but a superuser acting on purpose
(``ALTER TABLE … DISABLE TRIGGER``): once set, ``revoked_at`` never changes again.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE FUNCTION moat_revocation_is_final() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'API key % is revoked; a revocation is final', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER api_keys_revocation_is_final
    BEFORE UPDATE OF revoked_at ON api_keys
    FOR EACH ROW EXECUTE FUNCTION moat_revocation_is_final();
"""

DOWNGRADE = """
DROP TRIGGER api_keys_revocation_is_final ON api_keys;
DROP FUNCTION moat_revocation_is_final();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
