"""People, for the gateway, the CLI, the console and Slack alike: add or update, disable,
list, and find by how a person is recognised (an OpenID Connect subject, a Slack user).

Least privilege: a key gives a person only scopes it holds itself, and changes only a
person whose scopes it holds (else a key could point a stronger person's sign-in at its
holder). Every function takes the caller's session, scoped to the tenant; the caller owns
the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.people import Person, PersonSet
from schemas.scopes import missing_scopes
from starter.service.errors import MoatError
from store import people


def not_found(handle: str) -> MoatError:
    return MoatError(
        ErrorCode.PERSON_NOT_FOUND,
        f"No person {handle[:80]!r} in this tenant; `moat people list` shows them.",
        {"handle": handle[:80]},
    )


def identity_taken(holders: list[str]) -> MoatError:
    who = f" ({', '.join(holders)})" if holders else ""
    return MoatError(
        ErrorCode.CONFLICT,
        f"Another person{who} is already recognised by this OpenID subject or Slack user: "
        "one identity names one person. Change or disable them first.",
        {"held_by": holders},
    )


def _may_give(granting: Sequence[str], scopes: Sequence[str], what: str) -> None:
    missing = missing_scopes(granting, scopes)
    if missing:
        raise MoatError(
            ErrorCode.SCOPE_MISSING,
            f"This key cannot {what} {', '.join(missing)}: a key gives a person only "
            "scopes it holds itself. Use a key that holds them (`moat api-key create "
            f"<tenant> --scope {missing[0]}`), or leave them out.",
            {"missing_scopes": missing, "key_scopes": list(granting)},
        )


async def put(
    session: AsyncSession,
    tenant_id: str,
    handle: str,
    body: PersonSet,
    *,
    actor: str,
    granting: Sequence[str],
    now: datetime,
) -> Person:
    """Add the person ``handle`` or set them to ``body`` (a disabled person is enabled
    again). ``granting``: the deciding key's scopes, which must cover the scopes given and
    those the person holds now."""
    _may_give(granting, body.scopes, "give")
    row = await people.get(session, tenant_id, handle)
    if row is not None:
        _may_give(granting, row.scopes, "change a person who holds")
    taken = await people.holders_of(session, tenant_id, handle, body)
    if taken:
        raise identity_taken(taken)
    try:
        row = await people.put(session, tenant_id, handle, body, actor, now)
    except IntegrityError:
        # Another request gave the same identity to someone else meanwhile.
        raise identity_taken([]) from None
    return people.to_person(row)


async def disable(session: AsyncSession, tenant_id: str, handle: str, now: datetime) -> Person:
    """Disable the person: their sign-in and Slack decisions are refused from now on and
    their console sessions end. Disabling twice keeps the first time."""
    row = await people.get(session, tenant_id, handle)
    if row is None:
        raise not_found(handle)
    return people.to_person(await people.disable(session, row, now))


async def list_all(session: AsyncSession, tenant_id: str) -> list[Person]:
    return [people.to_person(r) for r in await people.list_people(session, tenant_id)]


async def show(session: AsyncSession, tenant_id: str, handle: str) -> Person:
    row = await people.get(session, tenant_id, handle)
    if row is None:
        raise not_found(handle)
    return people.to_person(row)


async def find_by_oidc(
    session: AsyncSession, tenant_id: str, issuer: str, subject: str
) -> Person | None:
    """The person an OpenID provider's subject names, disabled or not (the caller says
    which refusal it is), or None."""
    row = await people.by_oidc(session, tenant_id, issuer, subject)
    return None if row is None else people.to_person(row)


async def find_by_slack_user(
    session: AsyncSession, tenant_id: str, slack_user_id: str
) -> Person | None:
    """The enabled person a Slack user id names, with their scopes, or None (no such
    person, or disabled): who decides when that user presses a button."""
    row = await people.by_slack_user(session, tenant_id, slack_user_id)
    if row is None or row.disabled_at is not None:
        return None
    return people.to_person(row)
