"""``python -m starter.devstack.providers --slack PORT --github PORT --webhook PORT
[--notion PORT]``: the provider fakes on 127.0.0.1 until SIGTERM or Ctrl-C (``moat up
--fake-providers`` runs it). The fake Notion starts with a demo database."""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from starter.devstack.providers import (
    FakeGithub,
    FakeNotion,
    FakeServer,
    FakeSlack,
    FakeWebhookReceiver,
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m starter.devstack.providers")
    parser.add_argument("--slack", type=int, required=True)
    parser.add_argument("--github", type=int, required=True)
    parser.add_argument("--webhook", type=int, required=True)
    parser.add_argument("--notion", type=int)
    args = parser.parse_args()
    fakes: list[tuple[FakeServer, int]] = [
        (FakeSlack(), args.slack),
        (FakeGithub(), args.github),
        (FakeWebhookReceiver(), args.webhook),
    ]
    if args.notion is not None:
        fakes.append((FakeNotion(demo=True), args.notion))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        for fake, port in fakes:
            fake.start(port)
        stop.wait()
    finally:
        for fake, _ in fakes:
            fake.stop()


if __name__ == "__main__":
    main()
