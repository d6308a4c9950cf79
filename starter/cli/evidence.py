"""``moat evidence``: export a tenant's transparency log as a bundle, and verify a bundle
offline (docs/transparency-log.md). ``verify`` exits 0 when every check holds, 1 naming
each problem, 2 when the bundle cannot be read as one."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from schemas.settings import MoatSettings
from schemas.translog import NoteError, parse_vkey
from starter.cli.identity import AsTenant, Local
from starter.cli.output import AsJson, err, fail, out, print_json, usage
from starter.devstack.ports import local_settings

if TYPE_CHECKING:
    from starter.cli.bundle_export import Since

evidence_app = typer.Typer(
    no_args_is_help=True,
    help="Export the tenant's transparency log as a bundle; verify a bundle offline.",
)

UNREADABLE = 2


@evidence_app.command("export", cls=AsTenant)
def export(
    since: Annotated[
        str,
        typer.Option("--since", help="A tree size (first leaf index; 0: all) or an ISO time."),
    ],
    out_dir: Annotated[Path, typer.Argument(help="A new or empty directory.")],
    witness: Annotated[
        list[str] | None,
        typer.Option("--witness", help="A witness's vkey to include (repeatable)."),
    ] = None,
) -> None:
    """Write the bundle: the latest checkpoint, the keys, every leaf from --since with its
    object and inclusion proof, and from a size with a kept checkpoint, consistency.json."""
    from starter.cli import bundle_export

    try:
        start = bundle_export.Since.parse(since)
    except ValueError as exc:
        raise usage(
            str(exc), "e.g. --since 0, --since 1200, --since 2026-01-01T00:00:00Z"
        ) from None
    for vkey in witness or []:
        try:
            parse_vkey(vkey)
        except NoteError as exc:
            raise usage(f"--witness {vkey}: {exc}", "pass the vkey the witness printed") from None
    if out_dir.exists() and any(out_dir.iterdir()):
        raise usage(f"{out_dir} is not empty", "export into a new directory")
    settings = local_settings()
    try:
        note = bundle_export.write_keys(settings, out_dir, witness or [])
        size = bundle_export.size_of(note)
        written = _write_entries(settings, out_dir, start, size)
        with_proof = start.size is not None and bundle_export.consistency(
            settings, out_dir, start.size, size
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise fail(
            "export_failed",
            f"the gateway's answer is not the log's: {exc}",
            "check --url / MOAT_GATEWAY_URL names a Moat gateway, then export again",
        ) from None
    also = f", consistency from size {start.size}" if with_proof else ""
    out.print(f"wrote {out_dir}: {written} leaves of a tree of {size}{also}", highlight=False)
    out.print(f"verify it: moat evidence verify {out_dir}", highlight=False, soft_wrap=True)


def _write_entries(settings: MoatSettings, out_dir: Path, start: Since, size: int) -> int:
    """entries.jsonl and the objects, a page at a time, its progress on stderr."""
    from rich.progress import Progress

    from starter.cli import bundle_export, tenant_api

    params: dict[str, Any] = {"start": start.size, "since": start.time, "size": size}
    written = 0
    with (out_dir / "entries.jsonl").open("w") as lines, Progress(console=err) as progress:
        task = progress.add_task("leaves", total=size - (start.size or 0))
        while True:
            page = tenant_api.call(
                settings,
                "GET",
                "/v1/log/entries",
                params=params | {"limit": bundle_export.PAGE},
                hints=bundle_export.HINTS,
            )
            for entry in page["entries"]:
                bundle_export.write_entry(out_dir, lines, entry)
            written += len(page["entries"])
            progress.update(task, completed=written)
            if page.get("next") is None:
                return written
            params = {"start": page["next"], "size": size}


@evidence_app.command("verify", cls=Local)
def verify(
    bundle: Annotated[Path, typer.Argument(help="The bundle's directory.")],
    checkpoint: Annotated[
        Path | None,
        typer.Option("--checkpoint", help="An earlier checkpoint this one must extend."),
    ] = None,
    witness: Annotated[
        list[str] | None,
        typer.Option(
            "--witness",
            help="A trusted witness's vkey (repeatable). Default: the bundle's witnesses/*.vkey.",
        ),
    ] = None,
    min_witnesses: Annotated[
        int, typer.Option("--min-witnesses", min=0, help="At least this many must cosign.")
    ] = 0,
    as_json: AsJson = False,
) -> None:
    """Check every signature, digest and proof of the bundle, fetching nothing: one line
    per problem (exit 1), else a summary (exit 0); 2 when it cannot be read."""
    from starter.cli.bundle_verify import BundleUnreadable, verify_bundle

    try:
        report = verify_bundle(bundle, checkpoint, witness or [], min_witnesses)
    except BundleUnreadable as exc:
        raise fail("bundle_unreadable", str(exc), "export it again", exit_code=UNREADABLE) from None
    summary = {
        "origin": report.checkpoint.origin,
        "tree size": report.checkpoint.size,
        "root": base64.b64encode(report.checkpoint.root).decode(),
        "entries": f"{report.entries} from leaf {report.first}" if report.entries else "0",
        "manifests": report.manifests,
        "receipts": report.receipts,
        "expired by retention": report.expired,
        "witnesses": ", ".join(report.witnesses) or "none",
        "consistent with": "-" if report.earlier is None else f"size {report.earlier}",
    }
    if as_json:
        print_json({"ok": not report.problems, "problems": report.problems, "summary": summary})
    else:
        for problem in report.problems:
            out.print(problem, highlight=False, markup=False, soft_wrap=True)
        if not report.problems:
            out.print(_table(summary))
    if report.problems:
        count = len(report.problems)
        raise fail(
            "evidence_rejected",
            f"{count} problem{'s' if count > 1 else ''} in {bundle}",
            "each line above names the entry; docs/transparency-log.md says what each means",
        )


def _table(summary: dict[str, Any]) -> Table:
    table = Table(title="[bold green]bundle verified[/]", show_header=False)
    table.add_column("what")
    table.add_column("", overflow="fold")
    for name, value in summary.items():
        table.add_row(name, str(value))
    return table
