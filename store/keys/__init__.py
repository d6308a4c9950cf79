"""Key files (JSON, mode 0600), no Postgres: the keyring that signs run manifests (with the
detached JWS it produces and verifies) and the keyring that signs run starts."""
