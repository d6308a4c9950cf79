"""Without Chromium the browser tests are skipped saying how to install it (the run's header
says so too), and fail where they are required (CI); never skipped in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import browser


def test_a_missing_chromium_names_the_command_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if browser.browser_tests_required():  # CI: .ci/run installs it
        assert browser.missing_chromium() is None
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "chromium")
    reason = browser.missing_chromium()
    assert reason is not None
    assert "apt-get install -y chromium" in reason and "-m 'not browser'" in reason
    monkeypatch.delenv("MOAT_BROWSER_TESTS", raising=False)
    assert "SKIPPED" in browser.pytest_report_header()
    monkeypatch.setenv("MOAT_BROWSER_TESTS", "required")
    assert "FAIL" in browser.pytest_report_header()
