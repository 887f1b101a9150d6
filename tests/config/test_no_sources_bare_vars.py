"""A configuration without sources is warned of; a path naming ``$VAR`` without braces is refused.

An empty file (or one of comments only) is a valid configuration (every section has its
defaults, ``sources`` is empty), but the agent it starts watches nothing: ``config validate``
warns. ``${HOME}`` is taken from the environment, ``$HOME`` was taken literally (a folder
named ``$HOME`` made beside the configuration): in a path it is an error naming the field
and saying to write ``${HOME}``, reported with every other problem.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.config import ConfigError, load_config, parse_config

NO_SOURCES = "no sources: the agent would watch nothing"


def _validate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["config", "validate", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("text", ["", "# nothing yet\n# sources: later\n", "sources: []\n"])
def test_validate_warns_that_a_config_without_sources_watches_nothing(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    code, out = _validate(str(path))
    assert code == 0, out
    assert "valid (0 sources" in out
    assert f"{path}: warning: {NO_SOURCES}" in out


def test_validate_for_a_board_warns_too(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    code, out = _validate("--for-board", str(path))
    assert code == 0, out
    assert f"{path}: warning: {NO_SOURCES}" in out


def test_a_config_with_a_source_has_no_such_warning(tmp_path: Path) -> None:
    from cdml_edge.config.checks import no_sources_warning

    (tmp_path / "in").mkdir()
    path = tmp_path / "f.yaml"
    path.write_text("sources:\n  - {name: a, path: in, modality: csv}\n")
    assert no_sources_warning(load_config(path)) is None
    code, out = _validate(str(path))
    assert code == 0, out
    assert NO_SOURCES not in out


@pytest.mark.parametrize(
    ("field", "value", "fixed"),
    [
        ("sources[0].path", "$HOME/incoming", "${HOME}/incoming"),
        ("sources[0].move_to", "/srv/$LINE/done", "/srv/${LINE}/done"),
        ("state_dir", "$STATE_DIRECTORY", "${STATE_DIRECTORY}"),
        ("output.jsonl", "$LOGS/out.jsonl", "${LOGS}/out.jsonl"),
        ("sources[0].link_roots[1]", "$DATA", "${DATA}"),
        ("sources[0].path", "${BASE:-$HOME}/in", "${HOME}"),
    ],
)
def test_a_path_naming_a_variable_without_braces_is_refused(
    tmp_path: Path, field: str, value: str, fixed: str
) -> None:
    source: dict[str, object] = {"name": "a", "path": "in", "modality": "csv"}
    data: dict[str, object] = {"sources": [source]}
    if field == "state_dir":
        data["state_dir"] = value
    elif field == "output.jsonl":
        data["output"] = {"jsonl": value}
    elif field.endswith("link_roots[1]"):
        source["link_roots"] = ["roots", value]
    else:
        source[field.rsplit(".", 1)[1]] = value
        if field.endswith("move_to"):
            source["on_done"] = "move"
    with pytest.raises(ConfigError) as err:
        parse_config(data, "f.yaml", base_dir=tmp_path)
    problems = dict(err.value.problems)
    assert field in problems, err.value.problems
    name = fixed.split("{")[1].split("}")[0]
    assert f"${name}" in problems[field] and fixed in problems[field]
    assert not (tmp_path / f"${name}").exists()


def test_the_refusal_comes_with_every_other_problem(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(
        "sources:\n  - {name: a, path: $HOME/incoming, modality: csv}\npack: {level: 99}\n"
    )
    code, out = _validate(str(path))
    assert code == 2, out
    assert "sources[0].path" in out and "write ${HOME}/incoming" in out
    assert "pack.level" in out
    assert not (tmp_path / "$HOME").exists()


@pytest.mark.parametrize(
    "value",
    ["${HOME}/in", "~/in", "${NOPE:-in}", "in$", "price$5", "a/$/b"],
)
def test_braces_a_tilde_and_a_dollar_that_names_nothing_are_fine(
    tmp_path: Path, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = parse_config(
        {"sources": [{"name": "a", "path": value, "modality": "csv"}]}, "f.yaml", tmp_path
    )
    assert "$" not in str(cfg.sources[0].path) or value in ("in$", "price$5", "a/$/b")


def test_a_dollar_outside_paths_is_left_alone(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "device": {"site": "line$3"},
            "sources": [
                {"name": "a", "path": "in", "modality": "csv"},
                {
                    "name": "cam",
                    "kind": "camera",
                    "url": "rtsp://u:pa$word@cam/1",
                    "modality": "image",
                },
            ],
            "mqtt": {"username": "u", "password": "$ecret", "allow_plaintext_password": True},
        },
        "f.yaml",
        tmp_path,
    )
    assert cfg.mqtt is not None and cfg.mqtt.password == "$ecret"
    assert cfg.sources[1].url == "rtsp://u:pa$word@cam/1"


def test_a_value_taken_from_the_environment_is_used_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDML_TEST_IN", "$literal")
    cfg = parse_config(
        {"sources": [{"name": "a", "path": "${CDML_TEST_IN}", "modality": "csv"}]},
        "f.yaml",
        tmp_path,
    )
    assert cfg.sources[0].path == tmp_path / "$literal"
