"""Configuration: round-trips, field-path errors, env substitution, units, CLI exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import ROOT
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.config import AppConfig, ConfigError, config_schema, load_config, parse_config
from cdml_edge.units import format_size, parse_duration, parse_size

FACTORY = ROOT / "configs" / "factory.yaml"
runner = CliRunner()


def _problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "factory.yaml")
    return info.value.problems


def _source(**extra: object) -> dict:
    return {"name": "cam", "path": "/data/cam", "modality": "image", **extra}


# -- units ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("512KiB", 512 * 1024),
        ("64MiB", 64 * 1024**2),
        ("64 MiB", 64 * 1024**2),
        ("2GB", 2 * 10**9),
        ("1.5GiB", int(1.5 * 1024**3)),
        ("10k", 10_000),
        ("7b", 7),
    ],
)
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "bad", ["", "MiB", "12 parsecs", "1.2.3MB", True, None, 1.5, "1e999MiB", float("inf")]
)
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (2, 2.0),
        ("2s", 2.0),
        ("500ms", 0.5),
        ("5min", 300.0),
        ("1h", 3600.0),
        ("7d", 604800.0),
        ("250us", 0.00025),
        (0.05, 0.05),
    ],
)
def test_parse_duration(text: object, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["soon", "5 fortnights", "", False, 1e999, "1e999s"])
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_format_size() -> None:
    assert format_size(512) == "512 B"
    assert format_size(64 * 1024**2) == "64.0 MiB"


# -- the model -----------------------------------------------------------------------------


def test_factory_example_is_valid_and_complete() -> None:
    config = load_config(FACTORY)
    assert [s.name for s in config.sources] == ["cam-a", "cam-b", "vib-1", "mic-1"]
    kinds = {s.kind for s in config.sources}
    assert kinds == {"folder", "camera"}
    assert {s.modality for s in config.sources} == {"image", "timeseries", "audio"}
    assert config.sources[0].window.seconds == pytest.approx(0.05)
    assert config.sources[0].window.max_bytes == 8 * 1024**2
    assert config.limits.max_inflight_bytes == 64 * 1024**2
    assert config.retention is not None and config.retention.max_age == 14 * 86400
    assert set(config.models) == {"image", "timeseries", "audio"}


def test_round_trip_through_yaml(tmp_path: Path) -> None:
    config = load_config(FACTORY)
    dumped = config.model_dump(mode="json")
    path = tmp_path / "again.yaml"
    path.write_text(yaml.safe_dump(dumped))
    again = load_config(path)
    assert again == config
    assert AppConfig.model_validate_json(config.model_dump_json()) == config


def test_defaults_are_bounded() -> None:
    config = parse_config({"sources": [_source()]})
    assert config.outbox.max_bytes > 0
    assert config.spool.max_bytes > 0
    assert config.quarantine.max_bytes > 0
    assert config.limits.max_inflight_bytes > 0
    assert config.mqtt is None and config.retention is None


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "f.yaml"
    path.write_text(yaml.safe_dump({"sources": [_source(path="in/cam")], "spool": {"dir": "sp"}}))
    config = load_config(path)
    assert config.sources[0].path == tmp_path / "conf" / "in" / "cam"
    assert config.spool.dir == tmp_path / "conf" / "sp"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("demo/camera.avi", "CONF/demo/camera.avi"),  # a video file: the config's folder
        ("/dev/video0", "/dev/video0"),
        ("rtsp://cam.local:8554/line", "rtsp://cam.local:8554/line"),
        ("videotestsrc ! videoconvert ! appsink", "videotestsrc ! videoconvert ! appsink"),
        (0, 0),
        ("2", "2"),
        (" 0", " 0"),  # a device index, as the capture reads it (stripped)
    ],
)
def test_a_camera_video_file_resolves_against_the_config_folder(
    tmp_path: Path, url: object, expected: object
) -> None:
    """A relative video file was opened from the working directory (the demo's, from /tmp)."""
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "f.yaml"
    cam = {"name": "cam", "kind": "camera", "url": url, "modality": "image"}
    path.write_text(yaml.safe_dump({"sources": [cam], "output": {"jsonl": "o.jsonl"}}))
    got = load_config(path).sources[0].url
    if isinstance(expected, str):
        expected = expected.replace("CONF", str(tmp_path / "conf"))
    assert got == expected


def test_state_folders_default_beside_the_config_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's report: default folders resolved against the working directory.

    So the same config started from two folders used two spools. Now they live in state_dir.
    """
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "line3.yaml"
    path.write_text(yaml.safe_dump({"sources": [_source(path="in/cam")], "retention": {}}))
    seen = set()
    for cwd in (tmp_path, tmp_path / "conf", Path("/")):
        monkeypatch.chdir(cwd)
        config = load_config(path)
        seen.add(
            (
                config.state_dir,
                config.spool.dir,
                config.quarantine.dir,
                config.retention.dir if config.retention else None,
            )
        )
    state = tmp_path / "conf" / "line3.state"
    assert seen == {(state, state / "spool", state / "quarantine", state / "retention")}


def test_state_dir_from_systemd_or_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({"quarantine": {"dir": "q"}}))
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/cdml-edge:/var/lib/cdml-edge/replay")
    config = load_config(path)
    assert config.state_dir == Path("/var/lib/cdml-edge")
    assert config.spool.dir == Path("/var/lib/cdml-edge/spool")
    assert config.quarantine.dir == tmp_path / "q"  # a dir that is set keeps its meaning
    path.write_text(yaml.safe_dump({"state_dir": "st"}))
    assert load_config(path).spool.dir == tmp_path / "st" / "spool"  # relative: config folder


# -- errors name their field path ----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        (
            {"sources": [_source(), _source(name="b", window={"seconds": -1})]},
            "sources[1].window.seconds",
            "greater than 0",
        ),
        (
            {"sources": [_source(window={"max_items": 0})]},
            "sources[0].window.max_items",
            "greater than or equal to 1",
        ),
        (
            {"sources": [_source(window={"max_bytes": "lots"})]},
            "sources[0].window.max_bytes",
            "not a size",
        ),
        (
            {"sources": [_source(window={"seconds": "soon"})]},
            "sources[0].window.seconds",
            "not a duration",
        ),
        ({"sources": [_source(modality="smell")]}, "sources[0].modality", "must be"),
        ({"sources": [_source(kind="radar")]}, "sources[0].kind", "must be"),
        ({"sources": [{"path": "/x", "modality": "image"}]}, "sources[0].name", "is required"),
        ({"sources": [_source(widnow={})]}, "sources[0].widnow", "unknown key"),
        ({"devcie": {"id": "x"}}, "devcie", "unknown key"),
        ({"device": {"id": "a/b"}}, "device.id", "MQTT topic level"),
        ({"pack": {"format": "rar"}}, "pack.format", "must be"),
        ({"pack": {"format": "zip", "level": 12}}, "pack.level", "0 to 9"),
        ({"mqtt": {"url": "http://x"}}, "mqtt.url", "embedded"),
        ({"mqtt": {"qos": 3}}, "mqtt.qos", "must be"),
        ({"mqtt": {"password": "hunter2"}}, "mqtt.password", "clear-text"),
        ({"mqtt": {"tls": {"cert": "c.pem"}}}, "mqtt.tls", "go together"),
        ({"spool": {"policy": "panic"}}, "spool.policy", "must be"),
        ({"retention": {"dir": "/r", "keep": "some"}}, "retention.keep", "must be"),
        ({"limits": {"max_inflight_bytes": 0}}, "limits.max_inflight_bytes", "greater than 0"),
        ({"health": {"metrics_port": 70000}}, "health.metrics_port", "less than or equal"),
        ({"models": {"smell": {"path": "m.onnx"}}}, "models.smell.modality", "not a modality"),
        ({"sources": [_source(models=["nope"])]}, "sources[0].models", "not a model name"),
        ({"sources": [_source(kind="camera", path=None)]}, "sources[0]", "needs 'url'"),
        ({"sources": [_source(on_done="move")]}, "sources[0]", "move_to"),
    ],
)
def test_errors_name_the_field(data: dict, path: str, fragment: str) -> None:
    problems = _problems(data)
    assert any(p == path and fragment in m for p, m in problems), problems


def test_unknown_key_suggests_the_close_match() -> None:
    problems = _problems({"sources": [_source(widnow={})]})
    assert ("sources[0].widnow", "unknown key (did you mean 'window'?)") in problems


def test_unknown_key_inside_a_model_entry_suggests_the_close_match() -> None:
    problems = _problems({"models": {"image": {"path": "m.onnx", "lables": []}}})
    assert ("models.image.lables", "unknown key (did you mean 'labels'?)") in problems


def test_huge_size_is_a_config_error_not_a_crash() -> None:
    problems = _problems({"limits": {"max_inflight_bytes": "1e999MiB"}})
    assert any(p == "limits.max_inflight_bytes" and "out of range" in m for p, m in problems)


def test_ipv6_broker_url() -> None:
    config = parse_config({"mqtt": {"url": "mqtt://[::1]:1883"}})
    assert config.mqtt is not None and config.mqtt.url == "mqtt://[::1]:1883"


def test_mqtt_format_and_discovery() -> None:
    config = parse_config({"mqtt": {}})
    assert config.mqtt is not None and config.mqtt.format == "json"  # the default
    assert config.mqtt.discovery is None and config.mqtt.sparkplug.group_id == "cdml"
    sp = parse_config({"mqtt": {"format": "sparkplug_b", "sparkplug": {"node_id": "n1"}}})
    assert sp.mqtt is not None and sp.mqtt.sparkplug.node_id == "n1"
    with pytest.raises(ConfigError, match="discovery: needs format: json"):
        parse_config({"mqtt": {"format": "sparkplug_b", "discovery": "homeassistant"}})
    with pytest.raises(ConfigError, match="group_id"):
        parse_config({"mqtt": {"format": "sparkplug_b", "sparkplug": {"group_id": "a/b"}}})


def test_mqtt_results_item_by_default_window_only_with_plain_json() -> None:
    config = parse_config({"mqtt": {}})
    assert config.mqtt is not None and config.mqtt.results == "item"
    assert config.results_mode() == "item" and parse_config({}).results_mode() == "item"
    window = parse_config({"mqtt": {"results": "window"}})
    assert window.mqtt is not None and window.results_mode() == "window"
    with pytest.raises(ConfigError, match="results: window needs format: json"):
        parse_config({"mqtt": {"results": "window", "format": "sparkplug_b"}})
    with pytest.raises(ConfigError, match="results: window cannot go with discovery"):
        parse_config({"mqtt": {"results": "window", "discovery": "homeassistant"}})
    with pytest.raises(ConfigError, match="mqtt.results"):
        parse_config({"mqtt": {"results": "windows"}})


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_duplicate_source_names() -> None:
    problems = _problems({"sources": [_source(), _source()]})
    assert any("used twice" in m for _, m in problems)


def test_message_format_names_the_file() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"sources": [_source(window={"seconds": 0})]}, "factory.yaml")
    assert str(info.value) == "factory.yaml: sources[0].window.seconds: must be greater than 0"


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("device:\n  id: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and "line" in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="mapping"):
        parse_config(["a"], "f.yaml")


# -- environment substitution --------------------------------------------------------------


def test_env_substitution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDML_TEST_ROOT", str(tmp_path))
    monkeypatch.setenv("CDML_TEST_ID", "press-7")
    monkeypatch.delenv("CDML_TEST_UNSET", raising=False)
    config = parse_config(
        {
            "device": {"id": "${CDML_TEST_ID}"},
            "sources": [_source(path="${CDML_TEST_ROOT}/cam")],
            "mqtt": {"url": "${CDML_TEST_UNSET:-mqtt://127.0.0.1:1883}"},
        }
    )
    assert config.device.id == "press-7"
    assert config.sources[0].path == tmp_path / "cam"
    assert config.mqtt is not None and config.mqtt.url == "mqtt://127.0.0.1:1883"


def test_env_substitution_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDML_TEST_UNSET", raising=False)
    problems = _problems({"sources": [_source(path="${CDML_TEST_UNSET}/cam")]})
    assert any(p == "sources[0].path" and "CDML_TEST_UNSET" in m for p, m in problems)


def test_factory_paths_follow_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CDML_DATA", str(tmp_path / "data"))
    config = load_config(FACTORY)
    assert config.sources[0].path == tmp_path / "data" / "cam-a"


# -- schema and CLI ------------------------------------------------------------------------


def test_schema_is_valid_json_schema() -> None:
    import jsonschema

    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "sources" in schema["properties"]


def test_schema_accepts_the_example_and_rejects_typos(monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(config_schema())
    example = load_config(FACTORY).model_dump(mode="json")
    assert not list(validator.iter_errors(example))
    example["devcie"] = {}
    assert list(validator.iter_errors(example))


def test_cli_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("cdml-edge ")


def test_cli_validate_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    result = runner.invoke(app, ["config", "validate", str(FACTORY)])
    assert result.exit_code == 2  # the models are not installed in /opt/cdml-edge/models here
    assert "models.image.path: /opt/cdml-edge/models/digits.onnx does not exist" in result.output
    monkeypatch.setenv("CDML_MODELS", str(FACTORY.parent.parent / "models"))
    result = runner.invoke(app, ["config", "validate", str(FACTORY)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (
            "    window:\n      seconds: 50ms",
            "    widnow:\n      seconds: 50ms",
            "sources[0].widnow",
        ),
        ("seconds: 50ms", "seconds: -50ms", "sources[0].window.seconds"),
        ("seconds: 50ms", "seconds: -1", "sources[0].window.seconds"),
    ],
)
def test_cli_validate_bad_copy_exits_2(tmp_path: Path, old: str, new: str, field: str) -> None:
    text = FACTORY.read_text()
    assert old in text
    bad = tmp_path / "factory.yaml"
    bad.write_text(text.replace(old, new, 1))
    proc = subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "config", "validate", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert field in proc.stderr and str(bad) in proc.stderr


def test_cli_schema_prints_json() -> None:
    result = runner.invoke(app, ["config", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["title"] == "cdml-edge configuration"
    assert schema["additionalProperties"] is False


def test_documented_reference_matches_the_models() -> None:
    from cdml_edge.config.reference import config_reference_markdown

    readme = (ROOT / "docs" / "config.md").read_text()
    block = readme.split("<!-- config-reference -->\n", 1)[1].split("<!-- /config-reference -->")[0]
    assert block == config_reference_markdown(), "run: python scripts/docs/update_config_docs.py"


def test_cli_schema_markdown_lists_every_section() -> None:
    result = runner.invoke(app, ["config", "schema", "--markdown"])
    assert result.exit_code == 0
    for key in AppConfig.model_fields:
        assert f"| `{key}` |" in result.output


def test_s3_section_becomes_process_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from cdml_edge.archive import s3

    names = (s3.ENDPOINT_ENV, s3.REGION_ENV, s3.INDEX_CACHE_ENV, s3.INDEX_CACHE_BYTES_ENV)
    for name in (*names, s3.settings.MIN_RATE_ENV):
        # setenv first so that monkeypatch restores the process environment afterwards
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    path = tmp_path / "f.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "s3": {
                    "endpoint": "http://127.0.0.1:9000",
                    "region": "eu-1",
                    "index_cache": "idx",
                    "index_cache_bytes": "8MiB",
                    "min_rate": "64KiB",
                }
            }
        )
    )
    config = load_config(path)
    assert config.s3 is not None
    s3.apply_s3_config(config.s3)
    import os

    assert os.environ[s3.ENDPOINT_ENV] == "http://127.0.0.1:9000"
    assert os.environ[s3.REGION_ENV] == "eu-1"
    assert os.environ[s3.INDEX_CACHE_ENV] == str(tmp_path / "idx")
    assert os.environ[s3.INDEX_CACHE_BYTES_ENV] == str(8 * 1024**2)
    assert s3.settings.min_rate_from_env() == 64 * 1024  # the slowest transfer a request keeps
    path.write_text(yaml.safe_dump({"s3": {"use_index_cache": False}}))
    s3.apply_s3_config(load_config(path).s3)  # type: ignore[arg-type]
    assert os.environ[s3.INDEX_CACHE_ENV] == "off" and s3.settings.index_cache_dir() is None
