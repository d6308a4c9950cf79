"""The Kubernetes manifests in ``deploy/k8s``: valid against the API schemas of a pinned
Kubernetes version (offline, unknown fields refused), and holding the deployment's rules:
workers alone mount the private signing keyring, read-only; gateways serve the public key
set; the admin port stays inside the cluster."""

from __future__ import annotations

import copy
import socket
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.stack import repo_root

# The oldest Kubernetes release the manifests are meant for; the validator ships its schemas.
KUBERNETES_VERSION = "1.33.0"
K8S = repo_root() / "deploy" / "k8s"


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def named(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to reach the network during validation fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network access during validation: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield


def validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.usefixtures("offline")
def test_every_document_is_valid_for_the_pinned_kubernetes_version() -> None:
    docs = documents()
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "Ingress", "Job"}
    for doc in docs:
        try:
            validate(doc)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            name = f"{doc['kind']}/{doc['metadata']['name']}"
            pytest.fail(f"{name}: {exc.message} at {where}")


@pytest.mark.usefixtures("offline")
def test_the_validator_refuses_unknown_fields() -> None:
    """Strict mode is what catches a misspelt field, which Kubernetes would drop silently."""
    doc = copy.deepcopy(named("Deployment", "moat-worker"))
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    with pytest.raises(kubernetes_validate.ValidationError, match="volumeMount"):
        validate(doc)


def pod(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = named("Deployment", name)["spec"]["template"]["spec"]
    return spec


def environment(container: dict[str, Any]) -> dict[str, str]:
    """The container's variables with a literal value, ConfigMap ``envFrom`` included."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(named("ConfigMap", source["configMapRef"]["name"])["data"])
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def mount_of(spec: dict[str, Any], file: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume mount and the volume that provide ``file`` to the pod's container."""
    (container,) = spec["containers"]
    path = PurePosixPath(file)
    for mount in container.get("volumeMounts", []):
        if PurePosixPath(mount["mountPath"]) == path.parent:
            (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
            source = volume.get("secret") or volume.get("configMap") or {}
            if path.name in {item["path"] for item in source.get("items", [])}:
                return mount, volume
    raise AssertionError(f"no volume provides {file}")


def secret_names(spec: dict[str, Any]) -> set[str]:
    return {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}


def test_workers_alone_mount_the_private_signing_keyring_read_only() -> None:
    worker, gateway = pod("moat-worker"), pod("moat-gateway")
    keyring = environment(worker["containers"][0])["MOAT_SIGNING_KEYRING"]
    mount, volume = mount_of(worker, keyring)
    assert mount["readOnly"] is True
    signing_secret = volume["secret"]["secretName"]
    assert signing_secret not in secret_names(gateway)
    assert "MOAT_SIGNING_KEYRING" not in environment(gateway["containers"][0])
    assert "MOAT_SIGNING_KEYRING" not in named("ConfigMap", "moat-config")["data"]


def test_gateways_serve_the_public_key_set_from_a_config_map() -> None:
    gateway = pod("moat-gateway")
    jwks = environment(gateway["containers"][0])["MOAT_JWKS_PATH"]
    mount, volume = mount_of(gateway, jwks)
    assert mount["readOnly"] is True and "configMap" in volume


def test_shared_keyrings_are_mounted_where_each_process_needs_them() -> None:
    for name, variables in {
        "moat-worker": ("MOAT_CODEC_KEYRING", "MOAT_START_KEYRING", "MOAT_CONNECTION_KEYRING"),
        "moat-gateway": (
            "MOAT_CODEC_KEYRING",
            "MOAT_START_KEYRING",
            "MOAT_CONNECTION_KEYRING",
            "MOAT_CODEC_DOOR",
        ),
    }.items():
        spec = pod(name)
        env = environment(spec["containers"][0])
        for variable in variables:
            mount, volume = mount_of(spec, env[variable])
            assert mount["readOnly"] is True and "secret" in volume, (name, variable)
    assert "MOAT_CODEC_DOOR" not in environment(pod("moat-worker")["containers"][0])


def test_every_secret_is_mounted_read_only_by_a_non_root_pod() -> None:
    specs = [pod("moat-worker"), pod("moat-gateway")]
    specs.append(named("Job", "moat-migrate")["spec"]["template"]["spec"])
    for spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            secret_volumes = {v["name"] for v in spec["volumes"] if "secret" in v}
            for mount in container.get("volumeMounts", []):
                if mount["name"] in secret_volumes:
                    assert mount.get("readOnly") is True, mount


def test_the_admin_port_stays_inside_the_cluster() -> None:
    (container,) = pod("moat-gateway")["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    admin_port = int(environment(container)["MOAT_ADMIN_PORT"])
    assert ports["admin"] == admin_port and ports["http"] != admin_port

    def targets(service: dict[str, Any]) -> set[Any]:
        return {p["targetPort"] for p in service["spec"]["ports"]}

    admin = named("Service", "moat-gateway-admin")
    assert admin["spec"]["type"] == "ClusterIP" and targets(admin) <= {"admin", admin_port}
    services = {d["metadata"]["name"]: d for d in documents() if d["kind"] == "Service"}
    ingresses = [d for d in documents() if d["kind"] == "Ingress"]
    assert ingresses
    for ingress in ingresses:
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                service = services[backend["name"]]
                assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
                assert not targets(service) & {"admin", admin_port}, backend
    for name, service in services.items():
        if name != admin["metadata"]["name"]:
            assert not targets(service) & {"admin", admin_port}
            assert service["spec"].get("type", "ClusterIP") == "ClusterIP"


def test_only_labelled_pods_may_open_the_admin_port() -> None:
    policy = named("NetworkPolicy", "moat-gateway")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app": "moat-gateway"}}
    for rule in policy["spec"]["ingress"]:
        if {"port": "admin"} in rule["ports"]:
            assert rule["from"] and all("podSelector" in peer for peer in rule["from"])
        else:
            assert "admin" not in {p["port"] for p in rule["ports"]}
