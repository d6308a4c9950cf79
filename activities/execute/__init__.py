"""The side effects of ``ExecuteCapability``, one module per step: ``policy`` (the start's
signature, the decision, the idempotency key), ``adapter`` (one attempt at the provider
call) and ``record`` (the receipt and what goes with it); ``events`` builds the events
each step appends, from its input alone.

Each bookkeeping step is one transaction, keyed by the execution's receipt id, so a retried
attempt or a reset run repeats nothing; the events each step records are appended in that
same transaction.
"""
