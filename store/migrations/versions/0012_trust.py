"""The trust plane: a per-minute rollup of outcome events, its refresh mark, and probes.

- ``outcome_events.recorded_at``: when the event was written. An execution that waited
  (retries, an approval) records an outcome whose ``timestamp`` (its initiation) lies far
  back; the rollup's refresh finds new events by ``recorded_at``, so none is missed.
  Existing rows get the migration's time, which makes the first refresh read them all.
- ``trust_rollup``: one row per tenant, capability version, real/synthetic and minute
  (``span_minutes`` 1), hour (60, summed from the minutes) and day (1440, from the hours),
  rebuilt whole whenever one of its events is new (so a refresh that runs twice changes
  nothing). A score reads minutes for 1 h and 24 h (at most 1,440 rows per capability
  version and kind of traffic), hours for 7 d (168) and days for 30 d (30), however heavy
  the traffic.
- ``trust_refresh``: per tenant, up to when the rollup has read ``recorded_at``.
- ``probes``: the synthetic prober's configuration (a Temporal Schedule runs each).

Every table holds tenant rows: row-level security (ENABLE and FORCE, the tenant policy)
and grants to the application role, like the others.

Revision ID: 0012
Revises: 0008
Create Date: 2026-11-26
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"
TABLES = ("trust_rollup", "trust_refresh", "probes")

UPGRADE = """
ALTER TABLE outcome_events ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX ix_outcome_events_tenant_recorded ON outcome_events (tenant_id, recorded_at);

CREATE TABLE trust_rollup (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    capability_id varchar(200) NOT NULL,
    capability_version varchar(50) NOT NULL,
    is_synthetic boolean NOT NULL,
    span_minutes integer NOT NULL
        CONSTRAINT ck_trust_rollup_span CHECK (span_minutes IN (1, 60, 1440)),
    bucket timestamptz NOT NULL,
    samples integer NOT NULL,
    successes integer NOT NULL,
    rate_limited integer NOT NULL,
    excluded integer NOT NULL,
    errors jsonb NOT NULL DEFAULT '{}',
    latency_histogram jsonb NOT NULL DEFAULT '{}',
    last_success_at timestamptz,
    last_failure_at timestamptz,
    CONSTRAINT pk_trust_rollup
        PRIMARY KEY (tenant_id, capability_id, capability_version, is_synthetic, span_minutes,
                     bucket)
);
CREATE INDEX ix_trust_rollup_tenant_span_bucket ON trust_rollup (tenant_id, span_minutes, bucket);

CREATE TABLE trust_refresh (
    tenant_id varchar(64) PRIMARY KEY REFERENCES tenants (id),
    refreshed_at timestamptz NOT NULL
);

CREATE TABLE probes (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    capability_id varchar(200) NOT NULL,
    capability_version varchar(50),
    input jsonb NOT NULL,
    connection_id varchar(200),
    interval_seconds integer NOT NULL CONSTRAINT ck_probes_interval CHECK (interval_seconds > 0),
    paused boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_probes_tenant ON probes (tenant_id);
"""


def _secured(table: str) -> str:
    return f"""
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {table} USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP_ROLE};
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    for table in TABLES:
        op.execute(_secured(table))


def downgrade() -> None:
    op.execute(
        """
DROP TABLE probes;
DROP TABLE trust_refresh;
DROP TABLE trust_rollup;
DROP INDEX ix_outcome_events_tenant_recorded;
ALTER TABLE outcome_events DROP COLUMN recorded_at;
"""
    )
