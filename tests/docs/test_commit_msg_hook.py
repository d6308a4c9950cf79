"""The repository's commit-msg hook refuses a subject over 72 characters, and ``make hooks``
installs it in a checkout and does nothing outside one."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / ".githooks" / "commit-msg"


def verdict(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run(["sh", str(HOOK), str(path)], capture_output=True, text=True)


def test_a_subject_of_73_characters_is_refused(tmp_path: Path) -> None:
    refused = verdict(tmp_path, "x" * 73 + "\n\nThe why.\n")
    assert refused.returncode != 0
    assert "73 characters" in refused.stderr


def test_a_subject_of_72_characters_passes_with_or_without_a_body(tmp_path: Path) -> None:
    assert verdict(tmp_path, "x" * 72 + "\n").returncode == 0
    assert verdict(tmp_path, "x" * 72 + "\n\n" + "a long body line " * 20 + "\n").returncode == 0


def test_characters_not_bytes_and_comments_skipped(tmp_path: Path) -> None:
    assert verdict(tmp_path, "é" * 72 + "\n").returncode == 0
    assert verdict(tmp_path, "é" * 73 + "\n").returncode != 0
    editor = "\n# Please enter the commit message " + "#" * 80 + "\n\nshort subject\n"
    assert verdict(tmp_path, editor).returncode == 0
    assert verdict(tmp_path, "# " + "y" * 80 + "\n" + "z" * 73 + "\n").returncode != 0


def test_the_hook_is_executable() -> None:
    assert os.access(HOOK, os.X_OK)


@pytest.mark.skipif(not (shutil.which("make") and shutil.which("git")), reason="make, git")
def test_make_hooks_installs_in_a_checkout_and_skips_outside(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(ROOT / "Makefile", outside / "Makefile")
    ran = subprocess.run(["make", "hooks"], cwd=outside, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / "Makefile", checkout / "Makefile")
    subprocess.run(["git", "init", "-q"], cwd=checkout, env=env, check=True)
    ran = subprocess.run(["make", "hooks"], cwd=checkout, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    configured = subprocess.run(
        ["git", "config", "core.hooksPath"], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert configured.stdout.strip() == ".githooks"
