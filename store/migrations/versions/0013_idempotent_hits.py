"""Idempotent hits, aggregated per execution; and outcome partitions that the application
role can actually create.

Idempotent hits, aggregated per execution: how often a stored answer was replayed, first
and last time. Replaces the permanent ``policy_decisions`` row each replay used to commit
(write amplification any tenant could trigger by repeating a request): gateways count hits
in memory and add them here in batches, one row per execution.

Under row-level security like every tenant table (ENABLE and FORCE, the tenant policy);
the application role may read, insert and update (the counters), never delete.

``moat_ensure_outcome_partitions`` runs as its owner with ``search_path = pg_catalog, …``
(0003), so its unqualified ``CREATE TABLE`` aimed at ``pg_catalog`` and failed for the
application role: a month's partition was never created after the migration's first
three. It now names the tables' schema.

Revision ID: 0013
Revises: 0008
Create Date: 2026-11-26
"""

from alembic import op
from sqlalchemy import text

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"

UPGRADE = f"""
CREATE TABLE idempotent_hits (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    receipt_id varchar(64) NOT NULL,
    capability_id varchar(200) NOT NULL,
    idempotency_key varchar(256) NOT NULL,
    hits bigint NOT NULL CHECK (hits > 0),
    first_hit_at timestamptz NOT NULL,
    last_hit_at timestamptz NOT NULL,
    CONSTRAINT pk_idempotent_hits PRIMARY KEY (tenant_id, receipt_id)
);
ALTER TABLE idempotent_hits ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotent_hits FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON idempotent_hits USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE ON idempotent_hits TO {APP_ROLE};
"""


# Creates the monthly partitions from the month of `start_at` on, `months` of them, in the
# schema of outcome_events; a month whose rows already sit in the default partition is left
# there (its partition can no longer be created: the schedule creates them months ahead).
PARTITIONS = """
CREATE OR REPLACE FUNCTION moat_ensure_outcome_partitions(start_at timestamptz, months integer)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = {path} AS $$
DECLARE
    first_month date := date_trunc('month', start_at AT TIME ZONE 'UTC')::date;
    lower_bound date;
    name text;
BEGIN
    FOR i IN 0 .. months - 1 LOOP
        lower_bound := (first_month + make_interval(months => i))::date;
        name := format('outcome_events_%s', to_char(lower_bound, 'YYYY_MM'));
        IF to_regclass(format('%I.%I', {schema_literal}, name)) IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM {schema}.outcome_events_default
               WHERE "timestamp" >= (lower_bound::timestamp AT TIME ZONE 'UTC')
                 AND "timestamp" < ((lower_bound + interval '1 month')::timestamp
                                    AT TIME ZONE 'UTC'))
        THEN
            EXECUTE format(
                'CREATE TABLE %I.%I PARTITION OF %I.outcome_events FOR VALUES FROM (%L) TO (%L)',
                {schema_literal}, name, {schema_literal},
                (lower_bound::timestamp AT TIME ZONE 'UTC'),
                ((lower_bound + interval '1 month')::timestamp AT TIME ZONE 'UTC'));
        END IF;
    END LOOP;
END;
$$;
"""


def _schema() -> str:
    name: str = op.get_bind().execute(text("SELECT current_schema()")).scalar_one()
    return name


def _partitions(unqualified: bool = False) -> str:
    name = _schema()
    quoted = '"' + name.replace('"', '""') + '"'
    literal = "'" + name.replace("'", "''") + "'"
    sql = PARTITIONS.format(
        path=f"pg_catalog, {quoted}, pg_temp", schema=quoted, schema_literal=literal
    )
    if unqualified:  # the earlier body, for the downgrade
        sql = sql.replace("%I.%I PARTITION OF %I.", "%I PARTITION OF ").replace(
            f"{literal}, name, {literal},", "name,"
        )
    return sql


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(_partitions())


def downgrade() -> None:
    op.execute(_partitions(unqualified=True))
    op.execute("DROP TABLE idempotent_hits")
