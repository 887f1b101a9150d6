"""``cdml-edge test``: files scored through the live pipeline, the payloads printed.

Real ONNX model, real archive, real decoders; nothing published (a real Mosquitto listens),
no file touched, no state folder made; exit 1 on a bad file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier, image_classifier
from helpers.mqtt_brokers import SHARED_HOST, SHARED_PORT, Subscriber, port_open

EXE = shutil.which("cdml-edge", path=str(Path(sys.executable).parent))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A config with an image folder source (on_done: delete) and MQTT, and its folder."""
    brightness_classifier(tmp_path / "bright.onnx")
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "a-dark.jpg").write_bytes(jpeg(20))
    (inbox / "b-bright.jpg").write_bytes(jpeg(230))
    (inbox / "c-dark.jpg").write_bytes(jpeg(10))
    (inbox / "notes.txt").write_text("not an image\n")
    device = f"trial-{time.monotonic_ns()}"
    (tmp_path / "site.yaml").write_text(
        f"device: {{id: {device}}}\n"
        "sources:\n"
        "  - {name: cam, path: in, modality: image, on_done: delete, window: {max_items: 2}}\n"
        "models:\n  image: {path: bright.onnx}\n"
        f"mqtt: {{url: 'mqtt://{SHARED_HOST}:{SHARED_PORT}', topic_prefix: trial}}\n"
        "retention: {max_bytes: 1MiB}\n"
    )
    return tmp_path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    assert EXE is not None
    return subprocess.run([EXE, "test", *args], capture_output=True, text=True, timeout=120)


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_files_are_scored_and_printed_without_side_effects(site: Path) -> None:
    if not port_open(SHARED_PORT):
        pytest.fail("Mosquitto is not listening on 127.0.0.1:1883 (.ci/run starts it)")
    sub = Subscriber(SHARED_PORT, "trial/#", persistent=False)
    before = sorted(p.name for p in (site / "in").iterdir())
    try:
        res = _run(
            "--config",
            str(site / "site.yaml"),
            str(site / "in" / "a-dark.jpg"),
            str(site / "in" / "b-bright.jpg"),
        )
        time.sleep(0.5)
        heard = list(sub.messages)
    finally:
        sub.close()
    assert res.returncode == 0, res.stderr
    lines = _lines(res.stdout)
    results = [m["payload"] for m in lines if m["topic"].endswith("/cam/result")]
    assert [(r["item"], r["label"]) for r in results] == [
        ("a-dark.jpg", "dark"),
        ("b-bright.jpg", "bright"),
    ]
    assert all(r["model"] == "brightness" for r in results)
    windows = [m["payload"] for m in lines if m["topic"].endswith("/cam/window")]
    assert len(windows) == 1 and windows[0]["items"] == 2
    assert "2 files, 0 failed" in res.stderr
    assert heard == []  # nothing reached the broker
    assert sorted(p.name for p in (site / "in").iterdir()) == before  # on_done: delete ignored
    assert not (site / "site.state").exists()  # no spool, retention, quarantine or lock


def test_source_takes_a_few_files_from_its_folder_in_windows(site: Path) -> None:
    res = _run("--config", str(site / "site.yaml"), "--source", "cam", "--count", "3")
    assert res.returncode == 0, res.stderr
    lines = _lines(res.stdout)
    items = [m["payload"]["item"] for m in lines if m["topic"].endswith("/cam/result")]
    assert items == ["a-dark.jpg", "b-bright.jpg", "c-dark.jpg"]  # not notes.txt
    assert sum(m["topic"].endswith("/cam/window") for m in lines) == 2  # max_items: 2
    assert len(list((site / "in").iterdir())) == 4


def test_the_source_is_scored_by_its_own_models_as_the_agent_does(site: Path) -> None:
    """A source's ``models`` list holds in the trial as in the agent: no other model scores it."""
    image_classifier(site / "tiny.onnx")
    cfg = (site / "site.yaml").read_text()
    cfg = cfg.replace("window: {max_items: 2}}", "window: {max_items: 2}, models: [digits]}")
    cfg = cfg.replace(
        "  image: {path: bright.onnx}\n",
        "  image: {path: bright.onnx}\n  digits: {path: tiny.onnx, modality: image}\n",
    )
    (site / "site.yaml").write_text(cfg)
    res = _run("--config", str(site / "site.yaml"), str(site / "in" / "a-dark.jpg"))
    assert res.returncode == 0, res.stderr
    results = [m["payload"] for m in _lines(res.stdout) if m["topic"].endswith("/cam/result")]
    assert [r["model"] for r in results] == ["tiny-digits"]


def test_a_bad_file_is_an_error_event_and_exit_1(site: Path) -> None:
    bad = site / "in" / "broken.jpg"
    bad.write_bytes(b"\xff\xd8 not really a jpeg")
    res = _run("--config", str(site / "site.yaml"), str(bad), str(site / "in" / "a-dark.jpg"))
    assert res.returncode == 1, res.stderr
    errors = [m["payload"] for m in _lines(res.stdout) if m["topic"].endswith("/cam/error")]
    assert [e["item"] for e in errors] == ["broken.jpg"] and errors[0]["error_type"]
    assert "2 files, 1 failed" in res.stderr
    assert bad.exists()  # not quarantined


def test_an_unknown_source_is_a_usage_error(site: Path) -> None:
    res = _run("--config", str(site / "site.yaml"), "--source", "nope")
    assert res.returncode == 2
    assert "no source named 'nope' (there are: cam)" in res.stderr
    assert res.stderr.count("\n") == 1


def test_window_results_are_printed_inside_the_window_message(site: Path) -> None:
    """``mqtt.results: window``: the trial prints the window messages the agent would publish."""
    from cdml_edge.agent.trial import run_trial, source_named
    from cdml_edge.config import load_config
    from cdml_edge.model.runner import ModelRunner

    cfg_path = site / "site.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("trial}", "trial, results: window}"))
    cfg = load_config(cfg_path)
    sc = source_named(cfg, "cam")
    files = [(sc, site / "in" / n) for n in ("a-dark.jpg", "b-bright.jpg", "c-dark.jpg")]
    runners = {"image": ModelRunner.load(site / "bright.onnx")}
    report = run_trial(cfg, files, runners)
    assert [m.topic for m in report.messages] == ["cam/window", "cam/window"]  # max_items: 2
    windows = [json.loads(m.payload) for m in report.messages]
    assert [[(r["item"], r["label"]) for r in w["results"]] for w in windows] == [
        [("a-dark.jpg", "dark"), ("b-bright.jpg", "bright")],
        [("c-dark.jpg", "dark")],
    ]
    assert [w["seq"] for w in windows] == [1, 2]


def test_a_source_with_no_files_to_try_says_so(site: Path) -> None:
    """It printed "0 files, 0 failed" and exited 0: nothing said the folder was empty."""
    for f in (site / "in").iterdir():
        f.unlink()
    (site / "in" / "notes.txt").write_text("not an image\n")  # its patterns take none
    res = _run("--config", str(site / "site.yaml"), "--source", "cam")
    assert res.returncode == 2, res.stderr
    assert f"source cam: no files to try in {site / 'in'}" in res.stderr


def test_a_fifo_named_on_the_command_line_is_refused_not_waited_on(site: Path) -> None:
    """``test`` opened a FIFO and waited for a writer for ever."""
    fifo = site / "in" / "pipe.jpg"
    os.mkfifo(fifo)
    res = _run("--config", str(site / "site.yaml"), str(fifo), str(site / "in" / "a-dark.jpg"))
    assert res.returncode == 2, res.stderr
    assert "pipe.jpg: not a regular file (FIFO)" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1


def test_a_file_the_agent_would_refuse_as_too_large_is_refused_unread(site: Path) -> None:
    """``test`` is the live pipeline: a file over what a window may hold is ``FileTooLarge``.

    Before, ``test`` read it whole and scored it, where ``run`` refused and quarantined it.
    """
    cfg = (
        (site / "site.yaml").read_text().replace("max_items: 2}", "max_items: 2, max_bytes: 4KiB}")
    )
    (site / "site.yaml").write_text(cfg)
    big = site / "in" / "big.jpg"
    big.write_bytes(jpeg(100, size=256) + b"\0" * 8192)
    res = _run("--config", str(site / "site.yaml"), str(big), str(site / "in" / "a-dark.jpg"))
    assert res.returncode == 1, res.stderr
    msgs = _lines(res.stdout)
    errors = [m["payload"] for m in msgs if m["topic"].endswith("/cam/error")]
    assert [(e["item"], e["error_type"]) for e in errors] == [("big.jpg", "FileTooLarge")]
    assert "limit 4096" in errors[0]["message"]
    results = [m["payload"]["item"] for m in msgs if m["topic"].endswith("/cam/result")]
    assert results == ["a-dark.jpg"]
