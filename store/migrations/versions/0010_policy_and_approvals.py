"""Versioned policy documents, human approvals, and the policy version of every decision.

- ``policy_versions``: one row per ``PUT`` of a tenant's policy (mode and rules), numbered
  1, 2, … per tenant and never changed afterwards: the application role may insert and
  read, not update or delete, so a decision's version always names the document it used.
- ``approvals``: one per execution that waits for a person. The application role inserts
  the request and moves it out of ``pending`` once (``status`` and the decider's columns
  only); what was asked (digest, versions, requester, expiry) cannot change afterwards.
- ``policy_decisions.policy_version``: the version evaluated (0: the tenant's mode before it
  had a policy document).

Both new tables are under row-level security like every tenant table (ENABLE and FORCE,
the tenant policy).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"
DECIDED_COLUMNS = "status, decided_by, decided_at, comment, approved_digest"

UPGRADE = f"""
CREATE TABLE policy_versions (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    version integer NOT NULL CHECK (version > 0),
    mode varchar(16) NOT NULL,
    document jsonb NOT NULL,
    created_by varchar(100) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_policy_versions PRIMARY KEY (tenant_id, version)
);
ALTER TABLE policy_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE policy_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON policy_versions USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT ON policy_versions TO {APP_ROLE};

CREATE TABLE approvals (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    receipt_id varchar(64) NOT NULL UNIQUE,
    workflow_id varchar(300) NOT NULL,
    status varchar(16) NOT NULL,
    capability_id varchar(200) NOT NULL,
    capability_version varchar(50) NOT NULL,
    input_hash varchar(80) NOT NULL,
    policy_version integer NOT NULL,
    requested_by varchar(100) NOT NULL,
    allow_self_approval boolean NOT NULL DEFAULT false,
    input_key_id varchar(100) NOT NULL,
    input_sealed bytea NOT NULL,
    requested_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    decided_by varchar(100),
    decided_at timestamptz,
    comment text,
    approved_digest varchar(80)
);
CREATE INDEX ix_approvals_tenant_status ON approvals (tenant_id, status, requested_at);
ALTER TABLE approvals ENABLE ROW LEVEL SECURITY;
ALTER TABLE approvals FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON approvals USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT ON approvals TO {APP_ROLE};
GRANT UPDATE ({DECIDED_COLUMNS}) ON approvals TO {APP_ROLE};

CREATE TRIGGER policy_versions_write_once BEFORE UPDATE OR DELETE ON policy_versions
    FOR EACH ROW EXECUTE FUNCTION moat_reject_mutation();
CREATE FUNCTION moat_approval_decided_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'pending' THEN
        RAISE EXCEPTION 'approval % was already %', OLD.id, OLD.status;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER approvals_decided_once BEFORE UPDATE ON approvals
    FOR EACH ROW EXECUTE FUNCTION moat_approval_decided_once();

ALTER TABLE policy_decisions ADD COLUMN policy_version integer NOT NULL DEFAULT 0;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(
        "ALTER TABLE policy_decisions DROP COLUMN policy_version; "
        "DROP TABLE approvals; DROP FUNCTION moat_approval_decided_once(); "
        "DROP TABLE policy_versions"
    )
