"""``moat witness keygen`` and the witness's own files, without a gateway: the key file is
private and read back whole, a key is never overwritten, the state keeps each origin."""

from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner

from schemas import translog
from starter.cli import app as cli
from starter.cli.witness_files import last_cosigned, read_key, read_state, write_state

runner = CliRunner()


def test_keygen_writes_a_private_key_and_prints_its_vkey(tmp_path: Path) -> None:
    keyfile = tmp_path / "w.key"
    made = runner.invoke(cli, ["witness", "keygen", "--name", "auditor-1", "--out", str(keyfile)])
    assert made.exit_code == 0, made.output
    verifier = translog.parse_vkey(made.stdout.strip())
    assert (verifier.name, verifier.algorithm) == ("auditor-1", translog.ALG_COSIGNATURE_V1)
    assert keyfile.stat().st_mode & 0o777 == 0o600
    assert read_key(keyfile).vkey == made.stdout.strip()

    again = runner.invoke(cli, ["witness", "keygen", "--name", "other", "--out", str(keyfile)])
    assert again.exit_code == 2 and "exists" in again.stderr
    assert read_key(keyfile).name == "auditor-1"
    spaced = runner.invoke(
        cli, ["witness", "keygen", "--name", "a b", "--out", str(tmp_path / "x")]
    )
    assert spaced.exit_code == 2 and not (tmp_path / "x").exists()


def test_a_witness_without_its_files_or_with_another_name_is_a_usage_error(
    tmp_path: Path,
) -> None:
    assert runner.invoke(cli, ["witness", "--once"]).exit_code == 2
    keyfile = tmp_path / "w.key"
    runner.invoke(cli, ["witness", "keygen", "--name", "auditor-1", "--out", str(keyfile)])
    vkey = translog.make_vkey("moat.local/log/t", read_key(keyfile).key.public_key())
    args = ["witness", "--log-vkey", vkey, "--key", str(keyfile), "--state", str(tmp_path / "s")]
    named = runner.invoke(cli, [*args, "--name", "someone-else"])
    assert named.exit_code == 2 and "auditor-1" in named.stderr
    assert not (tmp_path / "s").exists()


def test_the_state_keeps_each_origins_last_checkpoint(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    root = hashlib.sha256(b"root").digest()
    for origin, size in (("moat.local/log/a", 3), ("moat.local/log/b", 5), ("moat.local/log/a", 4)):
        checkpoint = translog.Checkpoint(origin, size, root)
        write_state(state, read_state(state), checkpoint, translog.checkpoint_body(checkpoint))
    kept = read_state(state)
    assert [last_cosigned(kept, o).size for o in sorted(kept)] == [4, 5]  # type: ignore[union-attr]
    assert last_cosigned(kept, "moat.local/log/c") is None
    assert state.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left
