"""The example settings file, written from the settings' docstrings: every section and field
documented where it is declared, the shipped ``config/releasebot.example.toml`` exactly what
the generator writes (and what ``releasebot config example`` prints), every key in it, and
loading it giving the defaults."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from datetime import timedelta
from pathlib import Path

import pytest

from releasebot.cli import main
from releasebot.config import load_settings
from releasebot.config.example import field_docstrings, render_example
from releasebot.config.rules import Seconds, setting
from releasebot.config.sections import SECTIONS, Settings

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "config" / "releasebot.example.toml"
REGENERATE = "uv run releasebot config example > config/releasebot.example.toml"


def test_the_shipped_example_is_what_the_generator_writes() -> None:
    shipped = SHIPPED.read_text(encoding="utf-8")
    assert shipped == render_example(), f"the example file is stale: {REGENERATE}"


def test_the_cli_prints_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "example"]) == 0
    printed = capsys.readouterr()
    assert printed.out == render_example()
    assert printed.err == ""


def test_every_section_and_field_has_a_docstring() -> None:
    undocumented = []
    for name, section in SECTIONS.items():
        docs = field_docstrings(section)
        undocumented += [
            f"{name}.{spec.name}" for spec in fields(section) if not docs.get(spec.name, "").strip()
        ]
    assert undocumented == [], "give each field a docstring under its declaration"
    text = render_example()
    for name in SECTIONS:
        assert f"[{name}]\n# " in text, f"[{name}] has no class docstring"
    assert text.startswith("# releasebot settings.")  # the Settings docstring


def test_the_generated_file_holds_every_key_and_loads_as_the_defaults(tmp_path: Path) -> None:
    text = render_example()
    written = tomllib.loads(text)
    assert list(written) == list(SECTIONS)
    for name, section in SECTIONS.items():
        keys = [str(spec.metadata.get("key") or spec.name) for spec in fields(section)]
        assert list(written[name]) == keys
    path = tmp_path / "releasebot.toml"
    path.write_text(text, encoding="utf-8")
    assert load_settings(path, environ={}) == load_settings(None, environ={}) == Settings()


def test_durations_are_written_in_their_keys_unit() -> None:
    written = tomllib.loads(render_example())
    assert written["run"]["interval_seconds"] == 300
    assert isinstance(written["run"]["interval_seconds"], int)
    assert written["registry"]["timeout_seconds"] == 30.0
    assert isinstance(written["registry"]["timeout_seconds"], float)
    assert written["retention"]["after_days"] == 30


@dataclass(frozen=True)
class _Sample:
    """Not a section: shows what is read as a field's docstring and what is not."""

    documented: int = setting(1)
    """Says what it means.

    And a second paragraph."""
    undocumented: str = setting("a")
    after: timedelta = setting(timedelta(hours=2), Seconds(1, 86400), key="after_seconds")
    "A plain string literal counts too."

    def method(self) -> str:
        """A method's docstring is no field's."""
        return "x"


def test_a_fields_docstring_is_the_string_right_under_it() -> None:
    assert field_docstrings(_Sample) == {
        "documented": "Says what it means.\n\nAnd a second paragraph.",
        "after": "A plain string literal counts too.",
    }


def test_the_comment_and_value_of_each_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("releasebot.config.example.SECTIONS", {"sample": _Sample})
    assert render_example().split("[sample]\n", 1)[1] == (
        "# Not a section: shows what is read as a field's docstring and what is not.\n"
        "\n"
        "# Says what it means.\n"
        "#\n"
        "# And a second paragraph.\n"
        "documented = 1\n"
        "\n"
        'undocumented = "a"\n'
        "\n"
        "# A plain string literal counts too.\n"
        "after_seconds = 7200\n"
    )


@pytest.mark.parametrize(
    ("value", "toml"),
    [
        ('say "hi" \\ there', '"say \\"hi\\" \\\\ there"'),
        ("tab\there\x7f", '"tab\\u0009here\\u007F"'),
        ("ünïcode …", '"ünïcode …"'),
    ],
)
def test_strings_are_written_as_toml_reads_them_back(
    value: str, toml: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    @dataclass(frozen=True)
    class Strings:
        """Strings."""

        text: str = setting(value)
        """A string."""

    monkeypatch.setattr("releasebot.config.example.SECTIONS", {"strings": Strings})
    rendered = render_example()
    assert f"\ntext = {toml}\n" in rendered
    assert tomllib.loads(rendered)["strings"]["text"] == value
