"""docs/configuration.md is the page the settings model generates, and the generator covers
every field of the model."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from schemas.settings import MoatSettings
from starter.devstack.configuration import configuration_page, type_name

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def test_the_configuration_page_is_current() -> None:
    assert PAGE.read_text() == configuration_page(), (
        "docs/configuration.md is not current with schemas/settings.py: regenerate it with "
        "`make docs` (python -m starter.devstack.configuration docs/configuration.md)"
    )


def test_every_setting_has_a_row() -> None:
    page = configuration_page()
    for name in MoatSettings.model_fields:
        assert f"| `MOAT_{name.upper()}` |" in page, name


def test_a_new_setting_makes_the_page_stale() -> None:
    class Wider(MoatSettings):
        brand_new_seconds: float = Field(default=2.5, ge=0, description="A new setting.")

    page = configuration_page(Wider)
    assert page != configuration_page()
    assert "| `MOAT_BRAND_NEW_SECONDS` | number, ≥ 0 | `2.5` | A new setting. |" in page


def test_types_read_as_words() -> None:
    fields = MoatSettings.model_fields
    assert type_name(fields["admin_port"].annotation) == "integer"
    assert type_name(fields["codec_keyring"].annotation) == "path"
    assert type_name(fields["log_format"].annotation) == '`"json"` or `"text"`'
    assert type_name(fields["rate_limits"].annotation) == "mapping of string to number"
