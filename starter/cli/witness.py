"""``moat witness``: an independent key that cosigns a tenant's log checkpoints, each only
after checking it extends the last one it cosigned (docs/transparency-log.md, "Running a
witness"). It talks to the gateway like any tenant command and keeps its own key and
state files; a refusal (a bad log signature, an inconsistent checkpoint) posts nothing and
leaves the state as it was."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from schemas.settings import MoatSettings
from schemas.translog import (
    Checkpoint,
    NoteError,
    Verifier,
    cosign,
    from_hex,
    parse_checkpoint,
    parse_vkey,
    verify_consistency,
    verify_note,
)
from starter.cli.identity import Local
from starter.cli.output import UNAVAILABLE, err, fail, out, usage
from starter.cli.witness_files import (
    WitnessFileError,
    WitnessKey,
    key_text,
    last_cosigned,
    new_key,
    read_key,
    read_state,
    write_private,
    write_state,
)
from starter.devstack.ports import local_settings

witness_app = typer.Typer(
    add_completion=False,
    help="Witness a tenant's log: cosign each checkpoint consistent with the last one.",
)

HINTS = {
    "log_checkpoint_not_found": "the log has no checkpoint yet: wait for its schedule",
    "scope_missing": "the witness's key needs log:read and log:cosign",
}
REFUSED_HINT = (
    "the log showed a checkpoint that does not extend the one this witness cosigned: keep "
    "this output as evidence and tell the log's operator and its auditors"
)


def refuse(code: str, message: str) -> typer.Exit:
    """A checkpoint this witness will not cosign: exit 1, nothing posted or written."""
    return fail(code, message, REFUSED_HINT)


def check_extends(settings: MoatSettings, last: Checkpoint | None, new: Checkpoint) -> None:
    """Refuses unless ``new`` is consistent with ``last`` (a proof fetched from the log)."""
    from starter.cli import tenant_api

    if last is None:
        return
    if new.size < last.size or (new.size == last.size and new.root != last.root):
        raise refuse(
            "log_inconsistent",
            f"{new.origin}: the checkpoint of size {new.size} does not extend the one of "
            f"size {last.size} this witness cosigned",
        )
    if new.size == last.size:
        return
    answer = tenant_api.call(
        settings, "GET", "/v1/log/proof/consistency", params={"from": last.size, "to": new.size}
    )
    try:
        proof = [from_hex(h) for h in answer["proof"]]
    except (KeyError, TypeError, NoteError):
        raise refuse("log_inconsistent", "the log's consistency proof is malformed") from None
    if not verify_consistency(last.size, new.size, proof, last.root, new.root):
        raise refuse(
            "log_inconsistent",
            f"{new.origin}: the checkpoint of size {new.size} is not consistent with the one "
            f"of size {last.size} this witness cosigned (the consistency proof fails)",
        )


def witness_once(settings: MoatSettings, log: Verifier, key: WitnessKey, state: Path) -> str:
    """One round: fetch, verify, cosign, post, then keep the new state. What it did."""
    from starter.cli import tenant_api

    note = tenant_api.request(settings, "GET", "/v1/log/checkpoint", hints=HINTS).text
    try:
        body = verify_note(note, log)
        checkpoint = parse_checkpoint(body)
    except NoteError as exc:
        raise refuse(
            "log_signature_invalid", f"the log's checkpoint does not verify: {exc}"
        ) from None
    if checkpoint.origin != log.name:
        raise refuse(
            "log_signature_invalid",
            f"the checkpoint's origin {checkpoint.origin} is not the log key's {log.name}",
        )
    try:
        known = read_state(state)
        last = last_cosigned(known, checkpoint.origin)
    except WitnessFileError as exc:
        raise fail("witness_state_unreadable", str(exc), "fix or move the state file") from None
    check_extends(settings, last, checkpoint)
    if last is not None and last.size == checkpoint.size:
        return f"{checkpoint.origin} size {checkpoint.size}: already cosigned, nothing new"
    line = cosign(body, key.name, key.key, int(time.time()))
    tenant_api.call(
        settings,
        "POST",
        "/v1/log/cosignatures",
        body={"size": checkpoint.size, "line": line, "vkey": key.vkey},
    )
    write_state(state, known, checkpoint, body)
    return f"{checkpoint.origin} size {checkpoint.size}: cosigned as {key.name}"


def _inputs(log_vkey: str, key_file: Path, name: str | None) -> tuple[Verifier, WitnessKey]:
    try:
        log = parse_vkey(log_vkey)
    except NoteError as exc:
        raise usage(
            f"--log-vkey is not a log verifier key: {exc}", "pass GET /v1/log/key"
        ) from None
    try:
        key = read_key(key_file)
    except WitnessFileError as exc:
        raise usage(
            str(exc), "make one with `moat witness keygen --name NAME --out FILE`"
        ) from None
    if name is not None and name != key.name:
        raise usage(f"the key file is {key.name}'s, not {name}'s", "pass the key's own --name")
    return log, key


@witness_app.callback(invoke_without_command=True)
def witness(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option("--url", help="The gateway's address.")] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", help="A key of the tenant with log:read and log:cosign."),
    ] = None,
    log_vkey: Annotated[
        str | None, typer.Option("--log-vkey", help="The log's verifier key (GET /v1/log/key).")
    ] = None,
    key: Annotated[Path | None, typer.Option("--key", help="The witness key file.")] = None,
    state: Annotated[
        Path | None, typer.Option("--state", help="The witness's own state file.")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="The witness's name (must be the key's).")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="One round, then exit.")] = False,
    interval: Annotated[
        float | None, typer.Option("--interval", min=1, help="Seconds between rounds.")
    ] = None,
) -> None:
    """Fetch the log's checkpoint, verify its signature and its consistency with the last
    one cosigned, cosign it and post the cosignature (exit 1, nothing posted and the state
    unchanged, when it does not verify or is inconsistent)."""
    if ctx.invoked_subcommand is not None:
        return
    if log_vkey is None or key is None or state is None:
        raise usage("give --log-vkey, --key and --state", "see `moat witness --help`")
    if once and interval is not None:
        raise usage("give --once or --interval, not both")
    if api_key is not None:
        ctx.meta["moat.api_key"] = api_key
    settings = local_settings()
    if url is not None:
        settings = settings.model_copy(update={"gateway_url": url.rstrip("/")})
    log, witness_key = _inputs(log_vkey, key, name)
    while True:
        try:
            out.print(witness_once(settings, log, witness_key, state), highlight=False)
        except typer.Exit as exc:
            if interval is None or exc.exit_code != UNAVAILABLE:
                raise
        if interval is None:
            return
        time.sleep(interval)


@witness_app.command("keygen", cls=Local)
def keygen(
    name: Annotated[str, typer.Option("--name", help="The witness's name, e.g. auditor-1.")],
    out_file: Annotated[Path, typer.Option("--out", help="Where to write the private key.")],
) -> None:
    """Make a witness key (Ed25519, mode 0600) and print its verifier key (vkey)."""
    if out_file.exists():
        raise usage(f"{out_file} exists", "choose another --out; a key is never overwritten")
    try:
        key = new_key(name)
    except NoteError as exc:
        raise usage(str(exc)) from None
    write_private(out_file, key_text(key))
    err.print(f"wrote {out_file}; give this vkey to verifiers and the log:", highlight=False)
    out.print(key.vkey, highlight=False, soft_wrap=True)
