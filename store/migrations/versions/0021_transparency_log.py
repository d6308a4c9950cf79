"""Transparency log: one append-only Merkle log per tenant of every manifest and receipt,
its signed checkpoints and their witnesses' cosignatures; and what an effect left at the
provider, kept in its receipt.

- ``log_leaves``: one row per logged object (``kind`` ``manifest`` or ``receipt``,
  ``ref_id`` its id), with ``digest`` the SHA-256 of the object's bytes (a manifest's
  signed file, a receipt's RFC 8785 form): the leaf's data. Inserted in the transaction
  that records the object, so neither exists without the other. ``id`` is the order of
  arrival; ``leaf_index`` the leaf's position in the tenant's tree, set once by the
  sequencer (the only column the application role may update).
- ``log_nodes``: the hash of every complete subtree of a tenant's tree (``level`` 0 the
  leaf hashes, level k the subtree of 2^k leaves starting at ``idx`` * 2^k), written by the
  sequencer: any proof is O(log n) reads.
- ``log_heads``: a tenant's sequenced tree size and root (the sequencer's lock).
- ``log_checkpoints``: each signed checkpoint (C2SP tlog-checkpoint as a signed note).
- ``log_cosignatures``: witnesses' cosignature lines of a checkpoint.
- ``receipts.provider_evidence``: what the effect left at the provider (object id,
  permalink, the reconcile proof when an earlier attempt was found).

Under row-level security like every tenant table; the application role inserts and reads,
never deletes or rewrites a leaf, node, checkpoint or cosignature.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"

_TABLES = ("log_leaves", "log_nodes", "log_heads", "log_checkpoints", "log_cosignatures")


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE log_leaves (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    id bigint GENERATED ALWAYS AS IDENTITY,
    kind varchar(16) NOT NULL,
    ref_id varchar(100) NOT NULL,
    digest bytea NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    leaf_index bigint,
    CONSTRAINT pk_log_leaves PRIMARY KEY (tenant_id, id),
    CONSTRAINT uq_log_leaves_ref UNIQUE (tenant_id, kind, ref_id),
    CONSTRAINT uq_log_leaves_index UNIQUE (tenant_id, leaf_index),
    CONSTRAINT ck_log_leaves_kind CHECK (kind IN ('manifest', 'receipt')),
    CONSTRAINT ck_log_leaves_digest CHECK (octet_length(digest) = 32)
);
CREATE INDEX ix_log_leaves_digest ON log_leaves (tenant_id, digest);
CREATE INDEX ix_log_leaves_unsequenced ON log_leaves (tenant_id, id) WHERE leaf_index IS NULL;

CREATE TABLE log_nodes (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    level smallint NOT NULL,
    idx bigint NOT NULL,
    hash bytea NOT NULL,
    CONSTRAINT pk_log_nodes PRIMARY KEY (tenant_id, level, idx)
);

CREATE TABLE log_heads (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    size bigint NOT NULL DEFAULT 0,
    root bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_log_heads PRIMARY KEY (tenant_id)
);

CREATE TABLE log_checkpoints (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    size bigint NOT NULL,
    root bytea NOT NULL,
    note text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_log_checkpoints PRIMARY KEY (tenant_id, size)
);

CREATE TABLE log_cosignatures (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    size bigint NOT NULL,
    witness varchar(200) NOT NULL,
    line text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_log_cosignatures PRIMARY KEY (tenant_id, size, witness)
);

ALTER TABLE receipts ADD COLUMN provider_evidence jsonb;
"""
    )
    for table in _TABLES:
        op.execute(
            f"""
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {table} USING ({TENANT}) WITH CHECK ({TENANT});
"""
        )
    op.execute(
        f"""
GRANT SELECT, INSERT ON log_leaves, log_nodes, log_checkpoints, log_cosignatures TO {APP_ROLE};
GRANT UPDATE (leaf_index) ON log_leaves TO {APP_ROLE};
GRANT SELECT, INSERT, UPDATE ON log_heads TO {APP_ROLE};
"""
    )


def downgrade() -> None:
    op.execute(
        """
ALTER TABLE receipts DROP COLUMN provider_evidence;
DROP TABLE log_cosignatures;
DROP TABLE log_checkpoints;
DROP TABLE log_heads;
DROP TABLE log_nodes;
DROP TABLE log_leaves;
"""
    )
