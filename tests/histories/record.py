"""Records the workflow histories the replay test guards, one per path through the workflows.

    python -m tests.histories.record                  # every path not yet in the corpus
    python -m tests.histories.record dry_run ...      # only these paths (when missing)
    python -m tests.histories.record --patch ID PATH  # PATH again, as changed behind ID
    python -m tests.histories.record --list

Each path is driven on the real stack (tests.histories.recorder) and its run's history
exported as the SDK fetches it, encrypted with the corpus' own test key, then replayed
against the code that made it. A file already in the corpus is never rewritten: it is the
record of what runs of older code look like, which the current code must still replay.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path

from tests.histories.corpus import CORPUS, history_file, load, replay, write
from tests.histories.paths import DRIVERS, PATHS
from tests.histories.recorder import stack


async def record(names: list[str], patch: str | None) -> list[Path]:
    """Drive the paths named whose histories are not in the corpus yet, write each, and
    check it replays against the code that made it (a file that does not is removed)."""
    wanted = {
        name for name in names if not history_file(PATHS[name].workflow_type, name, patch).exists()
    }
    drivers = [drive for drive, paths in DRIVERS.items() if {p.name for p in paths} & wanted]
    written: list[Path] = []
    if not drivers:
        return written
    with tempfile.TemporaryDirectory(prefix="moat-histories-") as tmp:
        async with stack(Path(tmp)) as rec:
            # What the activities log about the failures the paths provoke is expected.
            logging.getLogger("temporalio").setLevel(logging.ERROR)
            for drive in drivers:
                for name, run in (await drive(rec)).items():
                    if name not in wanted:
                        continue
                    file = history_file(run.workflow_type, name, patch)
                    handle = rec.client.get_workflow_handle(run.workflow_id, run_id=run.run_id)
                    write(file, await handle.fetch_history(), run.run_id, PATHS[name].about)
                    failure = (await replay(load(file))).replay_failure
                    if failure is not None:
                        file.unlink()
                        raise SystemExit(f"{name}: its history does not replay: {failure}")
                    written.append(file)
                    print(f"recorded {file.relative_to(CORPUS)}")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.histories.record")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="default: every path")
    parser.add_argument(
        "--patch",
        metavar="ID",
        help="record PATHs again into <path>.<ID>.json: their commands changed behind "
        "workflow.patched(ID), and the histories recorded before stay as they are",
    )
    parser.add_argument("--list", action="store_true", help="list the paths and exit")
    args = parser.parse_args()
    if args.list:
        for path in PATHS.values():
            print(f"{path.name} ({path.workflow_type}): {path.about}")
        return
    unknown = set(args.paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown paths: {', '.join(sorted(unknown))} (see --list)")
    if args.patch and not args.paths:
        parser.error("--patch records the paths the change affects: name them")
    if not asyncio.run(record(args.paths or list(PATHS), args.patch)):
        print("nothing to record: every path named is in the corpus", file=sys.stderr)


if __name__ == "__main__":
    main()
