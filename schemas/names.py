"""Names that cross rooms, defined once: Temporal workflow and activity types, the search
attributes runs carry, the schedules' ids, and Moat's HTTP headers.

A workflow names its activities by these strings (it never imports them), the worker
registers them under the same strings, and the gateway, the dev stack and operators
(Temporal UI filters, ``temporal workflow`` commands) use the same attribute names.
"""

from __future__ import annotations

# Workflow types.
EXECUTE_WORKFLOW = "ExecuteCapability"
RETENTION_WORKFLOW = "ManifestRetention"
PARTITIONS_WORKFLOW = "OutcomePartitions"
TRUST_REFRESH_WORKFLOW = "RefreshTrust"
PROBE_WORKFLOW = "RunProbe"
PLAN_WORKFLOW = "ExecutePlan"
CANCEL_SWEEP_WORKFLOW = "SweepCancelledRuns"
# Posts an approval's Slack message, or replaces it with the outcome.
ANNOUNCE_APPROVAL_WORKFLOW = "AnnounceApproval"
ANNOUNCE_ALERT_WORKFLOW = "AnnounceAlert"
# Sequences and checkpoints every tenant's transparency log.
LOG_CHECKPOINT_WORKFLOW = "LogCheckpoint"

# Activity types.
CHECK_POLICY = "moat.check_policy"
CALL_ADAPTER = "moat.call_adapter"
RECORD_OUTCOME = "moat.record_outcome"
WRITE_MANIFEST = "moat.write_manifest"
# The record step with the run's manifest and its adapter's completion, one transaction.
RECORD_RUN = "moat.record_run"
EXPIRE_MANIFESTS = "moat.expire_manifests"
REQUEST_APPROVAL = "moat.request_approval"
RECORD_APPROVAL = "moat.record_approval"
BEGIN_PLAN = "moat.begin_plan"
PREPARE_STEP = "moat.prepare_step"
PLAN_CHECKPOINT = "moat.plan_checkpoint"
FINISH_PLAN = "moat.finish_plan"
# The signal an operator's cancel of a plan reaches its run with (a signal: it is recorded
# at once, whether or not a worker is free to take it up).
CANCEL_PLAN_SIGNAL = "cancel_plan"
SWEEP_CANCELLED = "moat.sweep_cancelled_runs"
LOG_CHECKPOINT = "moat.log_checkpoint"

# The update a person's decision reaches a run waiting for approval with.
DECIDE_APPROVAL_UPDATE = "decide_approval"
# MoatStatus of a run waiting for a person.
AWAITING_APPROVAL = "awaiting_approval"
ENSURE_PARTITIONS = "moat.ensure_outcome_partitions"

# The Temporal Schedule that starts the retention workflow.
RETENTION_SCHEDULE_ID = "moat-manifest-retention"
# The one that creates next months' partitions of outcome_events ahead of time.
PARTITIONS_SCHEDULE_ID = "moat-outcome-partitions"
REFRESH_TRUST = "moat.refresh_trust"
PREPARE_PROBE = "moat.prepare_probe"
PREPARE_ANNOUNCEMENT = "moat.prepare_announcement"
PREPARE_ALERT = "moat.prepare_alert"

# The Temporal Schedule that starts the retention workflow.
RETENTION_SCHEDULE_ID = "moat-manifest-retention"
# The Temporal Schedule that refreshes the trust rollup.
TRUST_SCHEDULE_ID = "moat-trust-rollup"
# The Temporal Schedule that records executions terminated or cancelled by an operator.
CANCEL_SWEEP_SCHEDULE_ID = "moat-cancelled-runs"
# A probe's schedule is this prefix and the probe's id.
PROBE_SCHEDULE_PREFIX = "moat-probe-"
# The Temporal Schedule that sequences and checkpoints the transparency logs.
LOG_CHECKPOINT_SCHEDULE_ID = "moat-log-checkpoint"

# Search attributes, all of type Keyword.
TENANT_ATTRIBUTE = "MoatTenant"
CAPABILITY_ATTRIBUTE = "MoatCapability"
STATUS_ATTRIBUTE = "MoatStatus"
IDEMPOTENCY_KEY_ATTRIBUTE = "MoatIdempotencyKey"
RECEIPT_ATTRIBUTE = "MoatReceiptId"
# Name and indexed type of every attribute, as registered with the Temporal namespace.
SEARCH_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    (TENANT_ATTRIBUTE, "Keyword"),
    (CAPABILITY_ATTRIBUTE, "Keyword"),
    (STATUS_ATTRIBUTE, "Keyword"),
    (IDEMPOTENCY_KEY_ATTRIBUTE, "Keyword"),
    (RECEIPT_ATTRIBUTE, "Keyword"),
)
# A keyword attribute holds a bounded string: the idempotency key's first characters only.
IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH = 200

# HTTP headers of the gateway's answers.
TRACE_HEADER = "X-Moat-Trace-Id"
REPLAYED_HEADER = "X-Moat-Idempotent-Replayed"
# The same fact under the name the IETF Idempotency-Key draft and the Agentic Commerce
# Protocol give it, for clients written to those.
STANDARD_REPLAYED_HEADER = "Idempotent-Replayed"
MANIFEST_SHA256_HEADER = "X-Moat-Manifest-Sha256"
RUN_ID_HEADER = "X-Moat-Run-Id"

# The key of a failure's details (adapter → workflow → envelope's ``error.details``) that
# holds what the provider answered, redacted and bounded.
PROVIDER_RESPONSE = "provider_response"
# The key of a ``host_not_allowed`` failure's details (adapter → workflow → envelope) that
# names the refused target: its ``host``, ``port`` and the ``allow_entry`` that admits it.
REFUSED_TARGET = "refused_target"

# The outbox: one delivery workflow per row, its attempt activity, the relay's channel.
DELIVER_WEBHOOK_WORKFLOW = "DeliverWebhook"
ATTEMPT_DELIVERY = "moat.attempt_delivery"
GIVE_UP_DELIVERY = "moat.give_up_delivery"
OUTBOX_CHANNEL = "moat_outbox"
