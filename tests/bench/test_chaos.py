"""The chaos campaign's own parts: its provider causes the faults it claims (the effect of a
cut-off answer counts once, its replay is whole), and its checks fail a run that lost or
doubled anything, so ``make chaos`` cannot pass by not looking."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import smtplib
from collections import Counter
from email.message import EmailMessage
from pathlib import Path

import httpx
import pytest

from bench.chaos import Key
from bench.chaos_checks import STALE_ATTEMPT, Observed, evaluate, stale_attempts
from bench.chaos_provider import ChaosProvider, Faults
from bench.chaos_tools import (
    NATURAL,
    NOTION_DATABASES,
    RECONCILE,
    SMTP_LATER,
    SMTP_TRANSIENT,
    TOOLS,
    ChaosGithub,
    ChaosMail,
    ChaosNotion,
    ChaosSlack,
    FakeFaults,
    _issue_id,
    inject,
)
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
        "http.request: effects per executed key",
        "duplicate effects (every capability)",
    }
    assert _failed(effects={"a": ["p-a"], "b": ["p-b"]}) == {
        "http.request: effects behind a failure receipt"
    }
    assert _failed(effects={"a": ["p-a", "p-b"]}) == {
        "http.request: effects per executed key",
        "duplicate effects (every capability)",
        "http.request: Idempotency-Keys per campaign key",
    }
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


async def test_the_slack_fake_counts_posts_by_key_and_a_delete_once() -> None:
    slack = ChaosSlack(seed=2)
    with slack:
        http = httpx.AsyncClient(base_url=f"{slack.base_url}/api")
        auth = {"Authorization": "Bearer xoxb-t"}
        assert slack.lose_answers(1) and not slack.lose_answers(1)  # one armed at a time
        post = {"channel": "C0A", "text": "k-1"}
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadTimeout)):
            await http.post("/chat.postMessage", json=post, headers=auth, timeout=2)
        answer = (await http.post("/chat.postMessage", json=post, headers=auth)).json()
        ts = answer["ts"]
        for _ in range(2):  # the repeat is answered message_not_found, and changes nothing
            await http.post("/chat.delete", json={"channel": "C0A", "ts": ts}, headers=auth)
        await http.aclose()
    created = slack.created()
    assert len(created["k-1"]) == 2 and created["k-1"][1] == ts  # the lost one counts
    assert slack.undone({"channel": "C0A", "ts": ts}) == (True, 1)
    assert slack.undone({"channel": "C0A", "ts": created["k-1"][0]}) == (False, 0)
    assert sum(slack.lost().values()) == 1 and slack.effects() == 3


async def test_the_github_fake_names_issues_as_answered_and_counts_closings() -> None:
    github = ChaosGithub(seed=2)
    with github:
        http = httpx.AsyncClient(base_url=github.base_url)
        auth = {"Authorization": "Bearer ghp_t"}
        assert github.rate_limit(1, 1)
        limited = await http.post("/repos/o/r/issues", json={"title": "k-2"}, headers=auth)
        assert limited.status_code == 403 and limited.headers["Retry-After"] == "1"
        issue = (await http.post("/repos/o/r/issues", json={"title": "k-2"}, headers=auth)).json()
        for _ in range(2):
            closed = await http.patch(
                f"/repos/o/r/issues/{issue['number']}", json={"state": "closed"}, headers=auth
            )
            assert closed.json()["state"] == "closed"
        await http.aclose()
    assert github.created() == {"k-2": [_issue_id(issue)]} == {"k-2": ["o/r#1"]}
    assert github.undone({"owner": "o", "repo": "r", "number": 1}) == (True, 1)


def _submit(mail: ChaosMail, subject: str, message_id: str) -> None:
    """One message to the mail fake over SMTP, as a client submits it."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "agent@chaos.test", "ops@chaos.test", subject
    msg["Message-ID"] = message_id
    msg.set_content("chaos")
    with smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=2) as smtp:
        smtp.login(mail.username, mail.password)
        smtp.send_message(msg)


async def test_the_mail_fake_counts_messages_by_subject_lost_answers_included() -> None:
    mail = ChaosMail(seed=2)  # its first lost answer is a dropped connection
    with mail:
        assert mail.allow_entry.split(",") == [mail.smtp_allow_entry, mail.imap_allow_entry]
        assert mail.connection()["config"]["imap"]["port"] == mail.imap_port
        assert mail.lose_answers(1) and not mail.lose_answers(1)  # one armed at a time
        with pytest.raises(smtplib.SMTPServerDisconnected):
            await asyncio.to_thread(_submit, mail, "k-1", "<a@chaos.test>")
        await asyncio.to_thread(_submit, mail, "k-1", "<b@chaos.test>")
        # Refused at RCPT TO, nothing filed: "try later", then a transient failure.
        assert mail.rate_limit(1, 1) and not mail.server_errors(1)
        for code, arm_next in ((SMTP_LATER, mail.server_errors), (SMTP_TRANSIENT, None)):
            with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
                await asyncio.to_thread(_submit, mail, "k-2", "<c@chaos.test>")
            assert refused.value.recipients["ops@chaos.test"][0] == code
            assert arm_next is None or arm_next(1)
        await asyncio.to_thread(_submit, mail, "k-2", "<c@chaos.test>")
    assert mail.created() == {
        "k-1": ["<a@chaos.test>", "<b@chaos.test>"],
        "k-2": ["<c@chaos.test>"],
    }
    assert mail.effects() == 3 and mail.requests_seen() == 5 and mail.lost() == {"drop": 1}


async def test_the_notion_fake_names_pages_as_answered_and_counts_trashings() -> None:
    notion = ChaosNotion(seed=2)
    create, trash = next((t.input, t.undo) for t in TOOLS if t.provider == "notion")
    assert trash is not None
    with notion:
        headers = {"Authorization": "Bearer t", "Notion-Version": "2025-09-03"}
        http = httpx.AsyncClient(base_url=f"{notion.base_url}/v1", headers=headers)
        inp = create("k-3", notion.base_url)
        assert inp["database_id"] in NOTION_DATABASES
        assert notion.rate_limit(1, 1) and not notion.rate_limit(1, 1)
        limited = await http.get(f"/databases/{inp['database_id']}")  # look-ups meet it too
        assert limited.status_code == 429 and limited.headers["Retry-After"] == "1"
        assert notion.server_errors(1) and not notion.server_errors(1)
        body = {"parent": {"database_id": inp["database_id"]},
                "properties": {"title": {"title": [{"text": {"content": "k-3"}}]}}}  # fmt: skip
        assert (await http.post("/pages", json=body)).status_code == 502
        page = (await http.post("/pages", json=body)).json()
        undo = trash.input(inp, {"page_id": page["id"]})
        for _ in range(2):  # the repeat finds it in the trash and changes nothing
            await http.patch(f"/pages/{undo['page_id']}", json={"in_trash": undo["archived"]})
        await http.aclose()
    assert notion.created() == {"k-3": [page["id"]]}
    assert notion.undone(undo) == (True, 1) and notion.effects() == 3


async def test_the_injector_arms_lost_answers_at_the_share_asked() -> None:
    slack = ChaosSlack(seed=2)
    injected: Counter[str] = Counter()
    with slack:
        http = httpx.AsyncClient(base_url=f"{slack.base_url}/api")
        task = asyncio.create_task(inject(slack, FakeFaults(1.0, 0, 0), random.Random(1), injected))
        auth = {"Authorization": "Bearer xoxb-t"}
        outcomes = []
        for n in range(4):
            try:
                await http.post("/chat.postMessage", json={"channel": "C0A", "text": f"{n}"},
                                headers=auth, timeout=1)  # fmt: skip
                outcomes.append("answered")
            except (httpx.RemoteProtocolError, httpx.ReadTimeout):
                outcomes.append("lost")
            await asyncio.sleep(0.2)  # the injector looks every 0.05 s
        task.cancel()
        await http.aclose()
    assert outcomes[0] == "answered" and outcomes[1:] == ["lost"] * 3
    assert sum(slack.lost().values()) == 3 and len(slack.created()) == 4


def _mixed_run() -> tuple[list[Key], Observed, dict[str, list[str]], dict[str, tuple[bool, int]]]:
    """A clean run of reconcile and natural keys: a post, its delete, a post whose answer
    was lost on the last attempt (outcome_unknown, one message), an issue and its close,
    and a delete never sent (its post did not execute)."""
    post = Key("p", 1, {"r-p"}, {"executed"}, capability="slack.post_message",
               strategy=RECONCILE, output={"ts": "1.5"})  # fmt: skip
    delete = Key("d", 2, {"r-d"}, {"executed"}, capability="slack.delete_message",
                 strategy=NATURAL, input={"channel": "C", "ts": "1.5"}, target=post)  # fmt: skip
    unknown = Key("u", 1, {"r-u"}, {"failed"}, capability="slack.post_message",
                  strategy=RECONCILE, error_codes={"outcome_unknown"})  # fmt: skip
    issue = Key("i", 1, {"r-i"}, {"executed"}, capability="github.create_issue",
                strategy=RECONCILE, output={"html_url": "http://h/o/r/issues/3"})  # fmt: skip
    close = Key("c", 1, {"r-c"}, {"executed"}, capability="github.close_issue",
                strategy=NATURAL, target=issue)  # fmt: skip
    never = Key("n", 1, capability="slack.delete_message", strategy=NATURAL, sent=False)
    keys = [post, delete, unknown, issue, close, never]
    receipts = {k.key: [(f"r-{k.key}", "success")] for k in keys if k.sent}
    manifests = [(f"r-{k.key}", f"/m/{k.key}", "sha256:x") for k in keys if k.sent]
    observed = Observed(receipts, 0, 0, manifests)
    effects = {"p": ["1.5"], "u": ["1.7"], "i": ["o/r#3"]}
    return keys, observed, effects, {"d": (True, 1), "c": (True, 1)}


def _mixed_failures(
    keys: list[Key] | None = None,
    effects: dict[str, list[str]] | None = None,
    undone: dict[str, tuple[bool, int]] | None = None,
) -> set[str]:
    clean_keys, observed, clean_effects, clean_undone = _mixed_run()
    chosen = keys if keys is not None else clean_keys
    verdicts = {path: True for _, path, _ in observed.manifests}
    effects = effects if effects is not None else clean_effects
    undone = undone if undone is not None else clean_undone
    verdict = evaluate(chosen, observed, effects, verdicts, (0, ""), undone=undone)
    return {row["check"] for row in verdict.rows if row["ok"] is False}


def test_reconcile_keys_hold_one_effect_or_outcome_unknown_never_two() -> None:
    assert _mixed_failures() == set()
    keys, observed, effects, undone = _mixed_run()
    keys[0].output = {"ts": "1.5", "reconciled": True}
    verdict = evaluate(keys, observed, effects, {}, (0, ""), undone=undone)
    rows = {row["check"]: row["found"] for row in verdict.rows}
    assert rows["slack.post_message (reconcile): executed / outcome_unknown / failed"] == (
        "1 / 1 / 0; 1 found by a look-up"
    )
    assert rows["undo keys not sent (their key did not execute)"] == 1
    assert _mixed_failures(effects={**effects, "p": ["1.5", "1.6"]}) == {
        "slack.post_message: effects per executed key",
        "slack.post_message: the answer names the key's own effect",
        "duplicate effects (every capability)",
    }
    assert _mixed_failures(effects={**effects, "u": ["1.7", "1.8"]}) == {
        "slack.post_message: outcome_unknown keys, at most 1 effect each",
        "duplicate effects (every capability)",
    }
    # The answer names another key's message.
    assert _mixed_failures(effects={**effects, "p": ["1.9"]}) == {
        "slack.post_message: the answer names the key's own effect"
    }
    assert _mixed_failures(effects={**effects, "i": []}) == {
        "github.create_issue: effects per executed key",
        "github.create_issue: the answer names the key's own effect",
    }
    keys = _mixed_run()[0]
    keys[2].error_codes = {"provider_server_error"}  # failed, yet its message is there
    assert _mixed_failures(keys=keys) == {"slack.post_message: effects behind a failure receipt"}


def test_natural_keys_reach_the_state_once_and_take_a_repeat_as_done() -> None:
    _, _, _, undone = _mixed_run()
    assert _mixed_failures(undone={**undone, "c": (False, 0)}) == {
        "github.close_issue: executed keys in the state asked, changed once"
    }
    assert _mixed_failures(undone={**undone, "c": (True, 2)}) == {
        "github.close_issue: executed keys in the state asked, changed once"
    }
    keys = _mixed_run()[0]
    keys[1].statuses, keys[1].error_codes = {"failed"}, {"provider_not_found"}
    assert _mixed_failures(keys=keys) == {
        "slack.delete_message: repeats failed as refusals (the state was reached)"
    }
    # Failed before anything was deleted: no refusal of a repeat.
    assert _mixed_failures(keys=keys, undone={**undone, "d": (False, 0)}) == set()
    keys[1].error_codes = {"network_error"}  # the answer lost, the message deleted: a figure
    verdict = evaluate(keys, _mixed_run()[1], _mixed_run()[2], {}, (0, ""), undone=undone)
    rows = {row["check"]: row for row in verdict.rows}
    reached = rows["slack.delete_message: failed keys whose state was reached all the same"]
    assert reached["found"] == "1: d (network_error 1)" and reached["ok"] is None
