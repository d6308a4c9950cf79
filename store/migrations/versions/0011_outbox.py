"""The outbox and what hangs off it: tenants' webhook subscriptions, the outbox rows (one
per event and subscription, written in the transaction of the state change they announce),
every delivery attempt, the dead letters that need a person, and compensating-action
records.

Every table is under row-level security like the other tenant tables. The relay finds due
rows of every tenant through two SECURITY DEFINER functions that open the owner's
``definer_relay`` policy only while they run, as ``moat_list_tenants`` does for tenants.
A statement trigger NOTIFYs ``moat_outbox`` when rows arrive or change state, so a
listening relay wakes at commit instead of at its next poll.

Revision ID: 0011
Revises: 0008
Create Date: 2026-11-26
"""

from alembic import op
from sqlalchemy import text

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"
DEFINER_SCOPE = "moat.definer_scope"
CHANNEL = "moat_outbox"

TABLES = """
CREATE TABLE webhook_subscriptions (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    url text NOT NULL,
    events text[] NOT NULL,
    status varchar(16) NOT NULL DEFAULT 'active'
        CONSTRAINT ck_webhook_subscriptions_status
        CHECK (status IN ('active', 'disabled', 'removed')),
    disabled_reason text,
    secret_kid varchar(100) NOT NULL,
    secret_sealed bytea NOT NULL,
    previous_secret_kid varchar(100),
    previous_secret_sealed bytea,
    previous_secret_expires_at timestamptz,
    max_retries integer NOT NULL DEFAULT 3,
    retry_base_seconds double precision NOT NULL DEFAULT 2,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_webhook_subscriptions_tenant ON webhook_subscriptions (tenant_id, status);

CREATE TABLE outbox (
    id varchar(64) PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    subscription_id varchar(64) NOT NULL REFERENCES webhook_subscriptions (id),
    event_id varchar(64) NOT NULL,
    event_type varchar(64) NOT NULL,
    aggregate_id varchar(300) NOT NULL,
    payload jsonb NOT NULL,
    occurred_at timestamptz NOT NULL,
    status varchar(16) NOT NULL DEFAULT 'pending'
        CONSTRAINT ck_outbox_status CHECK (status IN ('pending', 'delivered', 'dead_letter')),
    attempts integer NOT NULL DEFAULT 0,
    generation integer NOT NULL DEFAULT 1,
    dispatched_generation integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error text,
    delivered_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_outbox_subscription_event UNIQUE (subscription_id, event_id)
);
CREATE INDEX ix_outbox_pending ON outbox (seq) WHERE status = 'pending';
CREATE INDEX ix_outbox_queue ON outbox (subscription_id, aggregate_id, seq);
CREATE INDEX ix_outbox_tenant ON outbox (tenant_id, status, seq);

CREATE TABLE webhook_deliveries (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    outbox_id varchar(64) NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
    subscription_id varchar(64) NOT NULL REFERENCES webhook_subscriptions (id),
    webhook_id varchar(100) NOT NULL,
    event_type varchar(64) NOT NULL,
    attempt integer NOT NULL,
    attempted_at timestamptz NOT NULL,
    http_status integer,
    latency_ms integer NOT NULL,
    outcome varchar(16) NOT NULL,
    error text
);
CREATE INDEX ix_webhook_deliveries_subscription
    ON webhook_deliveries (tenant_id, subscription_id, attempted_at);

CREATE TABLE dead_letters (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    kind varchar(16) NOT NULL
        CONSTRAINT ck_dead_letters_kind CHECK (kind IN ('delivery', 'execution')),
    subject_id varchar(64) NOT NULL,
    reason text NOT NULL,
    error_code varchar(64),
    status varchar(16) NOT NULL DEFAULT 'open'
        CONSTRAINT ck_dead_letters_status CHECK (status IN ('open', 'requeued', 'resolved')),
    created_at timestamptz NOT NULL DEFAULT now(),
    closed_at timestamptz,
    closed_by varchar(64),
    note text,
    requeued_as varchar(64)
);
CREATE INDEX ix_dead_letters_tenant ON dead_letters (tenant_id, status, created_at);

CREATE TABLE compensating_actions (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    receipt_id varchar(64) NOT NULL,
    dead_letter_id varchar(64) NOT NULL REFERENCES dead_letters (id),
    attempted jsonb NOT NULL,
    effect varchar(32) NOT NULL DEFAULT 'unknown',
    operator_actions jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
"""

# Table -> what the application role may do (deliveries are a write-once log).
GRANTS = {
    "webhook_subscriptions": "SELECT, INSERT, UPDATE",
    "outbox": "SELECT, INSERT, UPDATE, DELETE",
    "webhook_deliveries": "SELECT, INSERT",
    "dead_letters": "SELECT, INSERT, UPDATE",
    "compensating_actions": "SELECT, INSERT, UPDATE",
}


def _rls(table: str, privileges: str) -> str:
    return f"""
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {table} USING ({TENANT}) WITH CHECK ({TENANT});
GRANT {privileges} ON {table} TO {APP_ROLE};
"""


def _relay(schema: str) -> str:
    path = f"pg_catalog, {schema}, pg_temp"
    scope = f"current_setting('{DEFINER_SCOPE}', true) = 'on'"
    previous = f"previous text := current_setting('{DEFINER_SCOPE}', true);"
    scope_on = f"PERFORM set_config('{DEFINER_SCOPE}', 'on', true);"
    scope_off = f"PERFORM set_config('{DEFINER_SCOPE}', coalesce(previous, ''), true);"
    return f"""
CREATE POLICY definer_relay ON outbox TO CURRENT_USER USING ({scope}) WITH CHECK ({scope});

-- Pending rows (of one tenant, or all) no delivery has been started for, oldest first,
-- each the head of its (subscription, aggregate) queue so one execution's events reach an
-- endpoint in order; locked until the caller's transaction ends, skipped by other relays.
CREATE FUNCTION moat_outbox_due(p_limit integer, p_tenant text DEFAULT NULL)
RETURNS TABLE (id text, tenant_id text, generation integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = {path}
AS $$
DECLARE
    {previous}
BEGIN
    {scope_on}
    RETURN QUERY
        SELECT o.id::text, o.tenant_id::text, o.generation
        FROM outbox o
        WHERE o.status = 'pending' AND o.dispatched_generation < o.generation
          AND (p_tenant IS NULL OR o.tenant_id = p_tenant)
          AND NOT EXISTS (
              SELECT 1 FROM outbox p
              WHERE p.subscription_id = o.subscription_id
                AND p.aggregate_id = o.aggregate_id
                AND p.seq < o.seq AND p.status = 'pending')
        ORDER BY o.seq
        LIMIT p_limit
        FOR UPDATE OF o SKIP LOCKED;
    {scope_off}
END;
$$;
REVOKE ALL ON FUNCTION moat_outbox_due(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_outbox_due(integer, text) TO {APP_ROLE};

CREATE FUNCTION moat_outbox_dispatched(p_ids text[], p_generations integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = {path}
AS $$
DECLARE
    {previous}
BEGIN
    {scope_on}
    UPDATE outbox o SET dispatched_generation = d.generation
    FROM unnest(p_ids, p_generations) AS d(id, generation)
    WHERE o.id = d.id;
    {scope_off}
END;
$$;
REVOKE ALL ON FUNCTION moat_outbox_dispatched(text[], integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_outbox_dispatched(text[], integer[]) TO {APP_ROLE};

CREATE FUNCTION moat_outbox_notify() RETURNS trigger
LANGUAGE plpgsql
SET search_path = {path}
AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT OR UPDATE OF status, generation ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION moat_outbox_notify();
"""


def _schema() -> str:
    name: str = op.get_bind().execute(text("SELECT current_schema()")).scalar_one()
    return '"' + name.replace('"', '""') + '"'


def upgrade() -> None:
    op.execute(TABLES)
    for table, privileges in GRANTS.items():
        op.execute(_rls(table, privileges))
    op.execute(_relay(_schema()))


def downgrade() -> None:
    op.execute(
        """
DROP FUNCTION moat_outbox_dispatched(text[], integer[]);
DROP FUNCTION moat_outbox_due(integer, text);
DROP TABLE compensating_actions;
DROP TABLE dead_letters;
DROP TABLE webhook_deliveries;
DROP TABLE outbox;
DROP FUNCTION moat_outbox_notify();
DROP TABLE webhook_subscriptions;
"""
    )
