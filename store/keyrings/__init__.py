"""Keyrings: the key files Moat keeps (JSON, mode 0600), no Postgres. ``codec`` encrypts
Temporal payloads and seals kept outputs, ``connections`` seals connection secrets,
``signing`` signs run manifests (detached JWS), ``start`` signs run starts and approval
decisions, and ``files`` writes them all (whole, private, one writer at a time).

"Keys" elsewhere in Moat are API keys (``store.api_keys``) and idempotency keys
(``store.idempotency``)."""
