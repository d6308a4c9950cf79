"""The domain rules of floor 3, used by the gateway and the CLI alike: executing (prepare,
replay, run), tenants and their API keys, budgets, evidence. Services take the caller's
session (the caller owns the transaction), return outcomes and raise ``MoatError(code)``;
they know nothing of HTTP."""

from starter.service.errors import MoatError

__all__ = ["MoatError"]
