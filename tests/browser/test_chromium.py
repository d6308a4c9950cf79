"""Without Chromium the browser tests fail saying how to install it, never skip in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import browser


def test_a_missing_chromium_names_the_command_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert browser.missing_chromium() is None  # here, and in CI (.ci/run installs it)
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "chromium")
    reason = browser.missing_chromium()
    assert reason is not None
    assert "apt-get install -y chromium" in reason and "-m 'not browser'" in reason
