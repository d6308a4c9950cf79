"""The chaos campaign's own parts: its provider causes the faults it claims (the effect of a
cut-off answer counts once, its replay is whole), and its checks fail a run that lost or
doubled anything, so ``make chaos`` cannot pass by not looking."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest

from bench.chaos import Key
from bench.chaos_checks import STALE_ATTEMPT, Observed, evaluate, stale_attempts
from bench.chaos_provider import ChaosProvider, Faults
from starter.devstack import serve_asgi


async def test_a_dropped_answer_has_its_effect_once_and_a_whole_replay() -> None:
    provider = ChaosProvider(Faults(0, 0, 0, drop=1.0), seed=1)
    async with serve_asgi(provider) as url, httpx.AsyncClient() as http:
        headers = {"Idempotency-Key": "p-1"}
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(f"{url}/effects", json={"key": "k"}, headers=headers)
        replay = await http.post(f"{url}/effects", json={"key": "k"}, headers=headers)
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert provider.effects_by_key() == {"k": ["p-1"]}
    assert provider.injected == {"drop": 1}


def _clean_run() -> tuple[list[Key], Observed, dict[str, list[str]]]:
    keys = [Key("a", 1, {"r-a"}, {"executed"}), Key("b", 3, {"r-b"}, {"failed"})]
    observed = Observed(
        receipts={"a": [("r-a", "success")], "b": [("r-b", "failure")]},
        unfinished_runs=0,
        running_workflows=0,
        manifests=[("r-a", "/m/a", "sha256:a"), ("r-b", "/m/b", "sha256:b")],
    )
    return keys, observed, {"a": ["p-a"]}


def _failed(
    *,
    keys: list[Key] | None = None,
    observed: Observed | None = None,
    effects: dict[str, list[str]] | None = None,
    verdicts: dict[str, bool] | None = None,
    rebuild: tuple[int, str] = (0, ""),
) -> set[str]:
    """The checks that fail when the clean run is changed as given."""
    clean_keys, clean_observed, clean_effects = _clean_run()
    verdict = evaluate(
        keys if keys is not None else clean_keys,
        observed or clean_observed,
        effects if effects is not None else clean_effects,
        verdicts if verdicts is not None else {"/m/a": True, "/m/b": True},
        rebuild,
        requests=7,
    )
    return {row["check"] for row in verdict.rows if row["ok"] is False}


def test_a_clean_run_passes_and_every_kind_of_loss_or_double_fails() -> None:
    assert _failed() == set()
    _, observed, _ = _clean_run()
    assert _failed(effects={"a": ["p-a", "p-a"]}) == {
        "provider effects per executed key",
        "duplicate effects",
    }
    assert _failed(effects={"a": ["p-a"], "b": ["p-b"]}) == {"effects behind a failure receipt"}
    lost = Observed({"a": observed.receipts["a"]}, 0, 0, observed.manifests[:1])
    assert "lost executions (accepted, no receipt)" in _failed(observed=lost)
    receipts = {**observed.receipts, "a": [("r-a", "success"), ("r-x", "success")]}
    twice = Observed(receipts, 0, 0, [*observed.manifests, ("r-x", "/m/a", "sha256:a")])
    assert _failed(observed=twice) == {"receipts: exactly one per answered key, the one answered"}
    assert "manifests that verify" in _failed(observed=Observed(receipts, 0, 0, observed.manifests))
    stuck = Observed(observed.receipts, 1, 2, observed.manifests)
    assert _failed(observed=stuck) == {"executions never finished (after the drain)"}
    assert _failed(verdicts={"/m/a": True, "/m/b": False}) == {"manifests that verify"}
    assert _failed(rebuild=(1, "1 differ")) == {"moat runs rebuild --verify"}
    unanswered = [Key("a", 1, {"r-a"}, {"executed"}), Key("b", 3)]
    assert _failed(keys=unanswered) == {"keys answered"}


def test_replayed_runs_are_reported_by_reason() -> None:
    keys, observed, effects = _clean_run()
    replays = dataclasses.replace(observed, replayed_manifests={"idempotent_hit": 2})
    verdict = evaluate(keys, replays, effects, {"/m/a": True, "/m/b": True}, (0, ""))
    (row,) = [r for r in verdict.rows if r["check"].startswith("runs that replayed")]
    assert row["found"] == "2: 2 new run for a completed execution (idempotent_hit)"
    assert row["ok"] is None  # a figure: the receipt answered, no tool repeated


def test_stale_attempts_are_counted_from_the_worker_logs(tmp_path: Path) -> None:
    (tmp_path / "worker-1.log").write_text(f"x\n{STALE_ATTEMPT} task_token=a\n{STALE_ATTEMPT}\n")
    (tmp_path / "worker-2.log").write_text("nothing\n")
    (tmp_path / "gateway-1.log").write_text(f"{STALE_ATTEMPT}\n")
    assert stale_attempts(tmp_path) == 2
