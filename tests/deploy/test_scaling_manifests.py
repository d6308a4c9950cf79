"""Scaling beyond one machine, as ``deploy/k8s`` declares it: workers scale on the SDK's
schedule-to-start latency (served by each worker, turned into per-pod metrics by the
adapter rules shipped beside them), gateways on CPU, the autoscalers own the replica counts,
and Temporal is reached through the SDK's standard environment configuration, its
credentials from Secrets only. The schema validation of every document is in
``test_deploy_manifests``."""

from __future__ import annotations

from typing import Any

import yaml

from tests.deploy.test_deploy_manifests import environment, named, pod


def _hpa(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = named("HorizontalPodAutoscaler", name)["spec"]
    return spec


def test_each_autoscaler_owns_its_deployment_replicas() -> None:
    for name in ("moat-worker", "moat-gateway"):
        spec = _hpa(name)
        assert spec["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
        }
        assert 2 <= spec["minReplicas"] < spec["maxReplicas"]
        # A replica count in the Deployment would reset the autoscaler's on every apply.
        assert "replicas" not in named("Deployment", name)["spec"]
        budget = named("PodDisruptionBudget", name)["spec"]
        assert budget["selector"] == named("Deployment", name)["spec"]["selector"]


def test_workers_scale_on_the_sdk_schedule_to_start_latency() -> None:
    (container,) = pod("moat-worker")["containers"]
    metrics_port = int(environment(container)["MOAT_METRICS_ADDRESS"].rsplit(":", 1)[1])
    assert {"name": "metrics", "containerPort": metrics_port} in container["ports"]
    annotations = named("Deployment", "moat-worker")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics_port)
    rules = yaml.safe_load(named("ConfigMap", "moat-prometheus-adapter")["data"]["config.yaml"])
    served = {rule["name"]["as"]: rule["seriesQuery"] for rule in rules["rules"]}
    scaled_on = [m["pods"]["metric"]["name"] for m in _hpa("moat-worker")["metrics"]]
    assert scaled_on and all(m["type"] == "Pods" for m in _hpa("moat-worker")["metrics"])
    sdk_histograms = {
        "temporal_workflow_task_schedule_to_start_latency_bucket",
        "temporal_activity_schedule_to_start_latency_bucket",
    }
    for metric in scaled_on:
        assert served[metric].split("{")[0] in sdk_histograms, metric


def test_gateways_scale_on_cpu_against_their_request() -> None:
    (metric,) = _hpa("moat-gateway")["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    (container,) = pod("moat-gateway")["containers"]
    assert container["resources"]["requests"]["cpu"]


def test_temporal_is_configured_the_standard_way_with_credentials_from_secrets() -> None:
    temporal = named("ConfigMap", "moat-temporal")["data"]
    assert temporal["TEMPORAL_ADDRESS"]
    assert "MOAT_TEMPORAL_ADDRESS" not in named("ConfigMap", "moat-config")["data"]
    for name in ("moat-worker", "moat-gateway"):
        spec = pod(name)
        (container,) = spec["containers"]
        assert environment(container)["TEMPORAL_ADDRESS"] == temporal["TEMPORAL_ADDRESS"]
        (api_key,) = [e for e in container["env"] if e["name"] == "TEMPORAL_API_KEY"]
        assert "value" not in api_key
        assert api_key["valueFrom"]["secretKeyRef"]["optional"] is True
        mount, volume = mount_of_tls(spec)
        assert mount["readOnly"] is True and volume["secret"]["optional"] is True


def mount_of_tls(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/moat/temporal-tls"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return mount, volume


def test_the_migrations_job_runs_as_the_owner() -> None:
    job = named("Job", "moat-migrate")["spec"]["template"]["spec"]
    (container,) = job["containers"]
    assert container["args"] == ["migrate"]
    (owner,) = [e for e in container["env"] if e["name"] == "MOAT_DATABASE_URL"]
    assert owner["valueFrom"]["secretKeyRef"]["key"] == "database-owner-url"
