"""Read scopes for the keys that had those reads, and the key each probe runs for.

- ``api_keys.scopes``: reading what executions answered now takes ``outputs:read`` and
  reading approvals ``approvals:read``. Every key made before could read both, so a key
  that executes (any ``execute:`` scope) gets ``outputs:read`` (it polls the answers of its
  calls) and a key that decides approvals (``approvals:write``) gets ``approvals:read``
  (it reads what it decides): no caller loses a read its role needs. Keys holding neither
  lose reads they had only because nothing was scoped. No key is given a write scope: the
  writes that took none (webhooks, dead letters, probes) are the holes this closes. Keys
  are otherwise never changed; ``FORCE ROW LEVEL SECURITY`` is lifted for this one update
  (as the owner, inside the migration's transaction) and put back.
- ``probes.api_key_id`` and ``probes.scopes``: the key that created (or last resumed) a
  probe and its scopes, signed into each of the probe's runs and checked by their policy
  step. Probes created before have neither and are skipped until a key holding what
  executing them needs resumes them.

Revision ID: 0017
Revises: 0015
Create Date: 2026-11-26
"""

from alembic import op

revision = "0017"
down_revision = "0015"
branch_labels = None
depends_on = None

COVERED = "EXISTS (SELECT 1 FROM unnest(scopes) s WHERE s IN ('*', {}))"

UPGRADE = f"""
ALTER TABLE api_keys NO FORCE ROW LEVEL SECURITY;
UPDATE api_keys SET scopes = array_append(scopes, 'outputs:read')
 WHERE EXISTS (SELECT 1 FROM unnest(scopes) s WHERE s LIKE 'execute:%')
   AND NOT {COVERED.format("'outputs:*', 'outputs:read'")};
UPDATE api_keys SET scopes = array_append(scopes, 'approvals:read')
 WHERE 'approvals:write' = ANY (scopes)
   AND NOT {COVERED.format("'approvals:*', 'approvals:read'")};
ALTER TABLE api_keys FORCE ROW LEVEL SECURITY;

ALTER TABLE probes ADD COLUMN api_key_id varchar(64);
ALTER TABLE probes ADD COLUMN scopes text[];
"""

DOWNGRADE = """
ALTER TABLE probes DROP COLUMN scopes;
ALTER TABLE probes DROP COLUMN api_key_id;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    # The read scopes granted stay: removing them could take away one an operator gave.
    op.execute(DOWNGRADE)
