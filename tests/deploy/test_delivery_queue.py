"""The delivery queue in ``deploy/k8s``: every worker pod polls it beside the execution
queue (``moat worker`` runs both), the queue names are set once for gateways and workers
alike, and a backlog on it does not scale the workers out."""

from __future__ import annotations

import re

import yaml

from schemas.settings import MoatSettings
from tests.deploy.test_deploy_manifests import named, pod

QUEUE_SETTINGS = ("MOAT_TASK_QUEUE", "MOAT_DELIVERY_TASK_QUEUE")


def test_every_worker_pod_runs_the_worker_that_polls_both_queues() -> None:
    (container,) = pod("moat-worker")["containers"]
    assert container["args"] == ["worker"]


def test_queue_names_are_never_set_per_deployment() -> None:
    """A gateway starts probe schedules on the delivery queue that workers poll: a name set
    for one Deployment only (rather than in the ConfigMap both read) would leave that work
    on a queue nobody polls."""
    for name in ("moat-worker", "moat-gateway"):
        (container,) = pod(name)["containers"]
        assert {"configMapRef": {"name": "moat-config"}} in container["envFrom"]
        own = {e["name"] for e in container.get("env", [])}
        assert not own & set(QUEUE_SETTINGS), name


def test_the_worker_autoscaler_ignores_the_delivery_queue() -> None:
    rules = yaml.safe_load(named("ConfigMap", "moat-prometheus-adapter")["data"]["config.yaml"])
    deliveries = MoatSettings().deliveries_task_queue
    for rule in rules["rules"]:
        (pattern,) = re.findall(r'task_queue!~"([^"]+)"', rule["metricsQuery"])
        assert re.fullmatch(pattern, deliveries), rule["name"]
        assert not re.fullmatch(pattern, MoatSettings().task_queue), rule["name"]
