"""The operators' alerting rules (``deploy/prometheus/alerts.yml``) and dashboard
(``deploy/grafana/moat.json``), checked offline: the rules by ``promtool check rules`` and
``promtool test rules`` (Debian's ``prometheus`` package; skipped with the reason where it
is missing, required in CI), the dashboard's structure; and every metric either names
appears in a real scrape of a worker that ran executions (Moat's gauges and the Temporal
SDK's own)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import uuid
from datetime import UTC, datetime

import httpx
import pytest
import yaml

import worker as worker_module
from schemas.trust import TrustCounts, TrustWindow, report
from starter.devstack import free_port
from starter.devstack.providers import FakeSlack
from starter.runtime.observability import TrustGauges
from starter.runtime.operator_gauges import GAUGES, OperatorGauges
from starter.runtime.temporal import connect
from store.operations import NeedsAPerson
from tests.runtime.test_operator_gauges import outcome_unknown
from tests.support.stack import Stack, StackFactory, repo_root
from tests.workflows.test_reconcile import CATALOG

RULES = repo_root() / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = repo_root() / "deploy" / "prometheus" / "alerts.test.yml"
DASHBOARD = repo_root() / "deploy" / "grafana" / "moat.json"
INSTALL = "apt-get install --no-install-recommends prometheus"

# What the SDK reports only once something happened: an activity scheduled, a failed
# activity, a workflow task that failed.
SDK_AFTER_WORK = (
    "temporal_activity_schedule_to_start_latency_bucket",
    "temporal_activity_execution_failed",
    "temporal_workflow_task_execution_failed",
)

# One capability's counts, so the trust gauges are in the scrape too.
SCORED = TrustCounts(
    capability_id="demo.echo",
    capability_version="1.0.0",
    is_synthetic=False,
    samples=40,
    successes=40,
    rate_limited=0,
    excluded=0,
    latency_histogram={10: 40},
)

PROMQL_WORDS = {"and", "or", "unless", "bool", "on", "ignoring", "group_left", "group_right"}
PROMQL_WORDS |= {"offset", "inf", "nan", "by", "without"}


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression reads: its identifiers outside label matchers,
    strings, ranges and grouping clauses, that are not functions, keywords or numbers."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    names = set()
    for found in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        following = bare[found.end() :].lstrip()
        word = found.group()
        if following.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        if bare[max(0, found.start() - 1)].isdigit():  # a duration's unit (5m) or an exponent
            continue
        names.add(word)
    return names


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    return exprs


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = (
            f"promtool is not installed: it checks the alerting rules. Install it with "
            f"`sudo {INSTALL}` (Debian, Ubuntu)."
        )
        if os.environ.get("MOAT_PROMTOOL_TESTS") == "required":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def test_promtool_checks_the_rules() -> None:
    tool = promtool()
    checked = subprocess.run(
        [tool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The rules fire on the series they are written for, after their `for`, and not before.
    tested = subprocess.run(
        [tool, "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_says_what_to_do() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) >= 8
    for rule in rules:
        notes = rule["annotations"]
        assert {"summary", "description", "runbook"} <= notes.keys(), rule["alert"]
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule["alert"]
        # The runbook names the CLI command or console page that handles it.
        assert "`moat " in notes["runbook"] or "/console/" in notes["runbook"], rule["alert"]


def test_dashboard_structure() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "moat-operations" and board["schemaVersion"] >= 36
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert "datasource" in variables
    for panel in board["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
    # Every operator gauge has a panel.
    read = set().union(*(metric_names(e) for e in dashboard_exprs()))
    assert set(GAUGES) <= read


def test_metric_names_parse() -> None:
    expr = 'sum by (kind) (rate(temporal_x_bucket{a="b"}[5m])) > 0 and on() moat_y offset 1h'
    assert metric_names(expr) == {"temporal_x_bucket", "moat_y"}


async def scrape_after_work(stack: Stack, slack: FakeSlack) -> set[str]:
    """The metric names a worker with ``MOAT_METRICS_ADDRESS`` serves once it ran an
    execution that failed an activity and a workflow task failed."""
    address = f"127.0.0.1:{free_port()}"
    settings = stack.settings.model_copy(
        update={
            "metrics_address": address,
            "temporal_address": stack.client.service_client.config.target_host,
        }
    )
    client = await connect(settings)
    runtime = client.service_client.config.runtime
    assert runtime is not None
    now = datetime.now(UTC)
    OperatorGauges(runtime.metric_meter).publish(NeedsAPerson(), now)
    TrustGauges(runtime.metric_meter).publish(
        report(TrustWindow.H1, TrustWindow.H1.bounds(now), [SCORED], [], 20)
    )
    names: set[str] = set()
    async with (
        worker_module.activity_deps(settings) as (sessions, http_out),
        worker_module.build_worker(client, settings, sessions, http_out),
        httpx.AsyncClient() as http,
    ):
        await outcome_unknown(stack, slack)
        # A workflow type nobody registered: its workflow task fails.
        handle = await client.start_workflow(
            "NoSuchWorkflow", id=f"ops-{uuid.uuid4().hex}", task_queue=settings.task_queue
        )
        for _ in range(100):
            text = (await http.get(f"http://{address}/metrics")).text
            names = {
                line.split("{")[0].split(" ")[0]
                for line in text.splitlines()
                if line and not line.startswith("#")
            }
            if all(name in names for name in SDK_AFTER_WORK):
                break
            await asyncio.sleep(0.1)
        await handle.terminate("test over")
    return names


def exported(name: str, names: set[str]) -> bool:
    return name in names or any(f"{name}{s}" in names for s in ("_bucket", "_sum", "_count"))


async def test_rules_and_dashboard_read_only_exported_metrics(
    make_stack: StackFactory, slack: FakeSlack
) -> None:
    async with make_stack(
        catalog=CATALOG, with_worker=False, http_allow_hosts=[slack.allow_entry]
    ) as stack:
        names = await scrape_after_work(stack, slack)
    assert all(name in names for name in SDK_AFTER_WORK), sorted(names)
    for expr in rule_exprs() + dashboard_exprs():
        missing = {m for m in metric_names(expr) if not exported(m, names)}
        assert not missing, f"{expr!r} reads {missing}, which no scrape has"
