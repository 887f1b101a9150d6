"""A ``factory.yaml`` written by hand at night: each slip is named, none is taken silently.

* a key given twice (YAML keeps the last: a second ``sources:`` used to drop the first list,
  a second ``modality:`` in one flow mapping used to win unseen) is an error naming both lines;
* a tab in the indentation says so; a device id or source name that cannot be an MQTT topic
  level names the character;
* a duration past ten years is refused (``health.interval: 1e12`` used to kill the health
  thread in a loop: a wait that long overflows the clock);
* a camera's ``url: yes`` / ``-1`` / ``''``, an infinite ``fps`` and a camera that is not
  ``modality: image`` are refused;
* two sources on one folder, a ``move_to`` that is the source's own folder (each file was
  scored hundreds of times a second, forever) and a source folder inside the agent's state are
  refused, by ``config validate`` and by ``run`` (exit 2);
* ``${VAR:-default}`` takes the default for an empty variable too, as the shell does, and a
  default may name another variable; an ``mqtt.url`` port past 65535 is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier
from helpers.paths import ROOT

from cdml_edge.config import ConfigError, load_config
from cdml_edge.config.schema import MAX_DURATION_S


def _cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's package
        check=False,
        timeout=timeout,
    )


def _write(tmp_path: Path, body: str, device: str = "device: {id: hand-written}\n") -> Path:
    """``factory.yaml`` in ``tmp_path``: ``device``, a model, the folder ``in``, ``body``."""
    brightness_classifier(tmp_path / "brightness.onnx")
    (tmp_path / "in").mkdir(exist_ok=True)
    path = tmp_path / "factory.yaml"
    path.write_text(
        device + "models:\n"
        "  image: {path: brightness.onnx}\n"
        "output: {jsonl: out.jsonl}\n" + textwrap.dedent(body)
    )
    return path


def _problems(path: Path) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


def _says(path: Path, field: str, fragment: str) -> None:
    problems = _problems(path)
    assert any(p == field and fragment in m for p, m in problems), problems


# -- YAML ------------------------------------------------------------------------------------


def test_a_second_sources_section_is_named_not_dropped(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
        sources:
          - {name: cam1, kind: folder, path: in, modality: image}
        sources:
          - {name: cam2, kind: folder, path: in2, modality: image}
        """,
    )
    proc = _cli("config", "validate", "--config", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sources: duplicate key (line 7; first at line 5)" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            "sources:\n  - {name: a, kind: folder, path: in, modality: image, modality: audio}\n",
            "sources[0].modality",
        ),
        (
            "sources:\n  - name: a\n    path: in\n    modality: image\n"
            "    window: {seconds: 1}\n    window: {max_items: 2}\n",
            "sources[0].window",
        ),
        ("limits: {max_inflight_bytes: 8MiB}\nlimits: {max_pixels: 100}\n", "limits"),
    ],
)
def test_every_key_given_twice_is_an_error(tmp_path: Path, body: str, field: str) -> None:
    _says(_write(tmp_path, body), field, "duplicate key")


def test_anchors_and_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
        sources:
          - &first {name: a, kind: folder, path: in, modality: image, window: &w {seconds: 1}}
          - {<<: *first, name: b, path: in2, window: *w}
        """,
    )
    cfg = load_config(path)
    assert [s.name for s in cfg.sources] == ["a", "b"]
    assert cfg.sources[1].path == tmp_path / "in2"


def test_a_tab_in_the_indentation_says_so(tmp_path: Path) -> None:
    path = _write(tmp_path, "sources:\n\t- {name: a, path: in, modality: image}\n")
    _says(path, "", "a tab: YAML indents with spaces only")


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ("device: {id: 'line/3'}\n", "device.id", "'line/3' holds '/'"),
        ("device: {id: 'line 3'}\n", "device.id", "'line 3' holds ' '"),
        ("device: {id: '+3'}\n", "device.id", "'+3' starts with '+'"),
        ("sources: [{name: 'cam#1', path: in, modality: image}]\n", "sources[0].name", "'#'"),
    ],
)
def test_a_name_that_is_no_topic_level_names_the_character(
    tmp_path: Path, body: str, field: str, fragment: str
) -> None:
    path = _write(tmp_path, body, device="")
    _says(path, field, fragment)
    _says(path, field, "MQTT topic level")


# -- units -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("health: {interval: 1e12}\n", "health.interval"),
        ("mqtt: {keepalive: 1e300}\n", "mqtt.keepalive"),
        (
            "sources: [{name: a, path: in, modality: image, window: {seconds: 100000d}}]\n",
            "sources[0].window.seconds",
        ),
    ],
)
def test_a_duration_past_ten_years_is_refused(tmp_path: Path, body: str, field: str) -> None:
    _says(_write(tmp_path, body), field, "days a duration may be")


def test_ten_years_is_still_a_duration(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "retention: {max_age: 3650d}\n"))
    assert cfg.retention is not None and cfg.retention.max_age == MAX_DURATION_S


def test_a_huge_health_interval_no_longer_kills_the_health_thread(tmp_path: Path) -> None:
    """Before: ``run`` started, and ``health died: OverflowError`` every 0.5-30 s, forever."""
    path = _write(tmp_path, "health: {interval: 1e12}\n")
    proc = _cli("run", "--config", str(path), "--duration", "3", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "health.interval" in proc.stderr and "OverflowError" not in proc.stderr


# -- cameras ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("camera", "field", "fragment"),
    [
        ("url: yes", "sources[0].url", "not True"),
        ("url: off", "sources[0].url", "not False"),
        ("url: -1", "sources[0].url", "0 or more"),
        ("url: ''", "sources[0].url", "is empty"),
        ("url: 0, fps: .inf", "sources[0].fps", "finite"),
        ("url: 0, modality: audio", "sources[0].modality", "its modality is image"),
    ],
)
def test_a_camera_that_cannot_be_is_refused(
    tmp_path: Path, camera: str, field: str, fragment: str
) -> None:
    source = "{name: cam, kind: camera, " + camera + "}"
    if "modality" not in camera:
        source = source.replace("kind: camera,", "kind: camera, modality: image,")
    _says(_write(tmp_path, f"sources: [{source}]\n"), field, fragment)


# -- folders ---------------------------------------------------------------------------------


def test_two_sources_on_one_folder_are_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
        sources:
          - {name: a, path: in, modality: image}
          - {name: b, path: ./in/, modality: image}
        """,
    )
    proc = _cli("config", "validate", "--config", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sources[1].path:" in proc.stderr and "taken by both" in proc.stderr, proc.stderr


def test_moving_files_into_their_own_folder_is_refused_by_run(tmp_path: Path) -> None:
    """Before: each file was moved onto itself, taken again and scored over 300 times a second."""
    path = _write(
        tmp_path,
        """\
        sources:
          - {name: a, path: in, modality: image, on_done: move, move_to: in,
             window: {seconds: 0.1, max_items: 1}, stable_seconds: 0.1}
        """,
    )
    (tmp_path / "in" / "x.jpg").write_bytes(jpeg(128))
    proc = _cli("run", "--config", str(path), "--duration", "3", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "sources[0].move_to:" in proc.stderr and "forever" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("state_dir: st\nsources: [{name: a, path: st, modality: image}]\n", "state folder"),
        (
            "state_dir: st\nsources: [{name: a, path: st/quarantine/a, modality: image}]\n",
            "inside the quarantine folder",
        ),
        (
            "spool: {dir: in}\nsources: [{name: a, path: in, modality: image}]\n",
            "inside the spool folder",
        ),
    ],
)
def test_a_source_in_the_agents_own_folders_is_refused(
    tmp_path: Path, body: str, fragment: str
) -> None:
    _says(_write(tmp_path, body), "sources[0].path", fragment)


def test_a_source_may_move_into_a_subfolder_or_another_source(tmp_path: Path) -> None:
    cfg = load_config(
        _write(
            tmp_path,
            """\
            sources:
              - {name: a, path: in, modality: image, on_done: move, move_to: in/done}
              - {name: b, path: in/done, modality: image, on_done: move, move_to: archive}
            """,
        )
    )
    assert [s.name for s in cfg.sources] == ["a", "b"]


# -- environment and MQTT ------------------------------------------------------------------------


def test_an_empty_variable_takes_the_default_as_in_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDML_TEST_BROKER_HOST", "")  # an EnvironmentFile's "HOST="
    monkeypatch.delenv("CDML_TEST_SITE", raising=False)
    monkeypatch.setenv("CDML_TEST_GATEWAY", "gw-7")
    cfg = load_config(
        _write(
            tmp_path,
            """\
            mqtt: {url: "mqtt://${CDML_TEST_BROKER_HOST:-127.0.0.1}:1883"}
            health: {metrics_host: "${CDML_TEST_SITE:-${CDML_TEST_GATEWAY}}"}
            """,
        )
    )
    assert cfg.mqtt is not None and cfg.mqtt.url == "mqtt://127.0.0.1:1883"
    assert cfg.health.metrics_host == "gw-7"


def test_a_variable_that_is_set_empty_without_default_stays_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDML_TEST_SITE", "")
    cfg = load_config(_write(tmp_path, 'health: {metrics_host: "x${CDML_TEST_SITE}"}\n'))
    assert cfg.health.metrics_host == "x"


@pytest.mark.parametrize("port", ["0", "65536", "99999"])
def test_an_mqtt_port_out_of_range_is_refused(tmp_path: Path, port: str) -> None:
    _says(_write(tmp_path, f'mqtt: {{url: "mqtt://127.0.0.1:{port}"}}\n'), "mqtt.url", port)


def test_a_model_key_that_is_a_typo_of_a_modality_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "")
    path.write_text(path.read_text().replace("  image: {path:", "  imgae: {path:"))
    _says(path, "models.imgae.modality", "did you mean 'image'?")


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ("device: {id: no}\n", "device.id", "YAML read this value as a boolean (False): quote it"),
        ("device: {id: 42}\n", "device.id", "YAML read this value as a number (42): quote it"),
        ("mqtt: {qos: on}\n", "mqtt.qos", "must be 0, 1 or 2, not True"),
    ],
)
def test_yaml_booleans_and_numbers_where_text_is_meant_are_named(
    tmp_path: Path, body: str, field: str, fragment: str
) -> None:
    _says(_write(tmp_path, body, device=""), field, fragment)
