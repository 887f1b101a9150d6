"""``cdml-edge replay`` / ``cdml-edge export`` from the command line (real broker, real files)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
import zipfile
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
import yaml
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring
from typer.testing import CliRunner, Result

from cdml_edge.cli import app
from cdml_edge.model.spec import META_KEY

VALUES = [[10, 200, 30], [250, 5], [128, 140, 90, 220], [60]]


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    model = brightness_classifier(tmp_path / "brightness.onnx")
    scored_ring(tmp_path / "ring", model, VALUES)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    cfg = {
        "device": {"id": "edge-1"},
        "models": {"image": {"path": "brightness.onnx"}},
        "retention": {"dir": "ring", "max_bytes": "64MiB"},
        "mqtt": {"url": "mqtt://127.0.0.1:1883", "topic_prefix": prefix},
        "spool": {"dir": "spool"},
    }
    (tmp_path / "factory.yaml").write_text(yaml.safe_dump(cfg))
    return {
        "dir": tmp_path,
        "model": model,
        "config": tmp_path / "factory.yaml",
        "prefix": Path(prefix),
    }


def _new_model(old: Path, path: Path) -> Path:
    """The same graph under version 2.0.0 with its labels the other way round."""
    import onnx

    m = onnx.load(str(old))
    for prop in m.metadata_props:
        if prop.key == META_KEY:
            spec = json.loads(prop.value)
            spec["labels"] = list(reversed(spec["labels"]))
            spec["version"] = "2.0.0"
            prop.value = json.dumps(spec)
    onnx.save(m, str(path))
    return path


def _lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_replay_cli_out_and_new_model(setup: dict[str, Path]) -> None:
    d = setup["dir"]
    runner = CliRunner()
    r = runner.invoke(
        app, ["replay", "--config", str(setup["config"]), "--out", str(d / "a.jsonl"), "-q"]
    )
    assert r.exit_code == 0, r.output
    assert "replayed 4 windows, 10 results" in r.output and "0 labels" in r.output
    # DIR defaults to retention.dir; a second run gives the same bytes
    r = runner.invoke(
        app,
        ["replay", str(d / "ring"), "--config", str(setup["config"]), "--out", str(d / "b.jsonl")],
    )
    assert r.exit_code == 0, r.output
    assert (d / "a.jsonl").read_bytes() == (d / "b.jsonl").read_bytes()
    new = _new_model(setup["model"], d / "brightness-v2.onnx")
    r = runner.invoke(
        app,
        [
            "replay",
            "--config",
            str(setup["config"]),
            "--model",
            str(new),
            "--out",
            str(d / "new.jsonl"),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "10 labels" in r.output
    recs = _lines(d / "new.jsonl")
    assert {r["model_version"] for r in recs} == {"2.0.0"}
    assert all(
        r["was"]["model_version"] == "1.0.0" and r["was"]["label"] != r["label"] for r in recs
    )
    r = runner.invoke(
        app,
        [
            "replay",
            "--config",
            str(setup["config"]),
            "--since",
            "2040-01-01",
            "--out",
            str(d / "none.jsonl"),
            "-q",
        ],
    )
    assert r.exit_code == 0 and "replayed 0 windows" in r.output
    assert (d / "none.jsonl").read_bytes() == b""
    r = runner.invoke(app, ["replay", "--config", str(setup["config"]), "--since", "yesterday"])
    assert r.exit_code == 2


def _published(setup: dict[str, Path], count: int) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    """Run ``replay --publish``; what a subscriber to the replay topics got (``count`` waited)."""
    prefix = str(setup["prefix"])
    got: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    subscribed = threading.Event()
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.on_message = lambda c, u, m: got.append((m.topic, json.loads(m.payload)))
    sub.on_connect = lambda c, u, f, rc, p: c.subscribe(f"{prefix}/edge-1/replay/#", qos=1)
    sub.connect("127.0.0.1", 1883)
    sub.loop_start()
    try:
        assert subscribed.wait(10)
        r = CliRunner().invoke(app, ["replay", "--config", str(setup["config"]), "--publish", "-q"])
        assert r.exit_code == 0, r.output
        end = time.monotonic() + 10
        while time.monotonic() < end and len(got) < count:
            time.sleep(0.05)
    finally:
        sub.loop_stop()
        sub.disconnect()
    return got


def test_replay_cli_publish_to_mosquitto(setup: dict[str, Path]) -> None:
    got = _published(setup, 14)
    results = [p for t, p in got if t.endswith("/replay/cam1/result")]
    windows = [p for t, p in got if t.endswith("/replay/cam1/window")]
    assert len(results) == 10 and len(windows) == 4
    assert {p["model"] for p in results} == {"brightness"}
    assert not (setup["dir"] / "replay-results.jsonl").exists()  # --publish alone: no file


def test_replay_publish_follows_mqtt_results_window(setup: dict[str, Path]) -> None:
    """``mqtt.results: window``: one message per replayed window, its items inside."""
    cfg = yaml.safe_load(setup["config"].read_text())
    cfg["mqtt"]["results"] = "window"
    setup["config"].write_text(yaml.safe_dump(cfg))
    got = _published(setup, 4)
    time.sleep(0.3)  # nothing else comes
    assert not [t for t, _ in got if t.endswith("/result")]
    windows = [p for t, p in got if t.endswith("/replay/cam1/window")]
    assert sorted(len(w["results"]) for w in windows) == sorted(len(v) for v in VALUES)
    assert {r["model"] for w in windows for r in w["results"]} == {"brightness"}


def test_export_cli(setup: dict[str, Path], tmp_path: Path) -> None:
    d = setup["dir"]
    runner = CliRunner()
    rel = tmp_path / "rel.csv"
    rel.write_text("name,label\nframe_000_01_200.jpg,glare\n")
    out = tmp_path / "train.tar.zst"
    r = runner.invoke(
        app,
        ["export", str(d / "ring"), str(out), "--split", "0.8/0.1/0.1", "--labels", str(rel), "-q"],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])  # warnings go to stderr
    assert summary["classes"] == {"bright": 4, "dark": 5, "glare": 1}
    assert summary["relabelled"] == 1 and sum(summary["splits"].values()) == 10
    r = runner.invoke(
        app,
        [
            "export",
            str(d / "ring"),
            str(tmp_path / "d.zip"),
            "--filter",
            "label=dark",
            "--since",
            "2026-01-01",
            "-q",
        ],
    )
    assert r.exit_code == 0 and "exported 5 items" in r.output
    r = runner.invoke(
        app, ["export", str(d / "ring"), str(tmp_path / "x.zip"), "--filter", "colour=red"]
    )
    assert r.exit_code == 2 and "unknown field" in r.output
    r = runner.invoke(
        app,
        [
            "export",
            str(d / "ring"),
            str(tmp_path / "x.zip"),
            "--filter",
            "label=nothing-like-this",
            "-q",
        ],
    )
    assert r.exit_code == 1 and "nothing to export" in r.output


def test_replay_cli_exits_1_when_it_skipped_a_corrupt_window(setup: dict[str, Path]) -> None:
    ring = setup["dir"] / "ring"
    victim = sorted(ring.glob("*.zip"))[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes: its SHA-256 no longer matches
    victim.write_bytes(bytes(data))
    r = CliRunner().invoke(
        app,
        ["replay", "--config", str(setup["config"]), "--out", str(setup["dir"] / "o.jsonl"), "-q"],
    )
    assert r.exit_code == 1, r.output
    assert "replayed 3 windows" in r.output and "1 corrupt windows skipped" in r.output
    assert victim.name in r.output  # the skipped window is named


def test_replay_publish_beside_the_live_agent(setup: dict[str, Path]) -> None:
    """replay --publish with the agent's configuration while the agent is connected.

    Its own client id (one id would make the broker drop the agent), its own spool (the agent's is
    locked), and the agent's retained status stays 'online'.
    """
    from cdml_edge.config import load_config
    from cdml_edge.outputs.factory import make_output

    cfg = load_config(setup["config"])
    agent_out = make_output(cfg)
    agent_out.start()
    try:
        stats = agent_out.stats
        deadline = time.monotonic() + 10
        while not stats()["broker_connected"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stats()["broker_connected"] and stats()["reconnects"] == 1
        r = CliRunner().invoke(app, ["replay", "--config", str(setup["config"]), "--publish", "-q"])
        assert r.exit_code == 0, r.output
        time.sleep(0.5)
        assert stats()["reconnects"] == 1 and stats()["broker_connected"]  # never kicked off
        got: list[bytes] = []
        sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        sub.on_message = lambda c, u, m: got.append(m.payload)
        sub.on_connect = lambda c, u, f, rc, p: c.subscribe(f"{setup['prefix']}/edge-1/status")
        sub.connect("127.0.0.1", 1883)
        sub.loop_start()
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        sub.loop_stop()
        sub.disconnect()
        assert got and json.loads(got[-1])["state"] == "online"
        assert (setup["dir"] / "spool" / "replay" / "lock").exists()
    finally:
        agent_out.stop()


def test_replay_publish_with_the_broker_away_exits_1(setup: dict[str, Path]) -> None:
    from helpers.ports import free_port

    cfg = yaml.safe_load(setup["config"].read_text())
    cfg["mqtt"]["url"] = f"mqtt://127.0.0.1:{free_port()}"
    setup["config"].write_text(yaml.safe_dump(cfg))
    r = CliRunner().invoke(app, ["replay", "--config", str(setup["config"]), "--publish", "-q"])
    assert r.exit_code == 1, r.output
    assert "14 messages not delivered, left in" in r.output
    assert str(setup["dir"] / "spool" / "replay") in r.output


def _replay(setup: dict[str, Path]) -> Result:
    return CliRunner().invoke(
        app,
        ["replay", "--config", str(setup["config"]), "--out", str(setup["dir"] / "o.jsonl"), "-q"],
    )


def _drop_catalog(ring: Path) -> None:
    for p in ring.glob("catalog.sqlite*"):
        p.unlink()


@pytest.mark.parametrize("catalog", [True, False])
def test_replay_names_and_fails_on_sidecars_pointing_outside(
    setup: dict[str, Path], catalog: bool
) -> None:
    ring = setup["dir"] / "ring"
    sidecar = sorted(ring.glob("*.window.json"))[0]
    doc = json.loads(sidecar.read_bytes())
    doc["archive"]["file"] = "../outside.zip"
    sidecar.write_text(json.dumps(doc))
    if not catalog:
        _drop_catalog(ring)
    r = _replay(setup)
    assert r.exit_code == 1, r.output
    assert "1 refused" in r.output and "outside.zip" in r.output
    assert "replayed 3 windows" in r.output


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_replay_refuses_an_archive_that_is_a_link_or_a_fifo(
    setup: dict[str, Path], kind: str
) -> None:
    ring = setup["dir"] / "ring"
    victim = sorted(ring.glob("*.zip"))[2]
    elsewhere = setup["dir"] / "elsewhere.zip"
    victim.rename(elsewhere)
    if kind == "link":
        victim.symlink_to(elsewhere)  # the very bytes, only behind a link
    else:
        os.mkfifo(victim)  # would block a reader for good
    r = _replay(setup)
    assert r.exit_code == 1, r.output
    assert "1 refused" in r.output
    assert ("symbolic link" if kind == "link" else "a FIFO") in r.output
    assert victim.name in r.output


def test_replay_refuses_a_manifest_listing_one_member_20000_times(
    setup: dict[str, Path],
) -> None:
    ring = setup["dir"] / "ring"
    sidecar = sorted(ring.glob("*.window.json"))[0]
    doc = json.loads(sidecar.read_bytes())
    archive = ring / doc["archive"]["file"]
    with zipfile.ZipFile(archive) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    inner = json.loads(members["manifest.json"])
    inner["items"] = inner["items"][:1] * 20_000  # one 3 KB member, listed 20,000 times
    members["manifest.json"] = json.dumps(inner).encode()
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    data = archive.read_bytes()
    doc["archive"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    doc["manifest"]["items"] = doc["manifest"]["items"][:1] * 20_000
    doc["manifest"]["results"] = {}
    sidecar.write_text(json.dumps(doc))
    r = _replay(setup)
    assert r.exit_code == 1, r.output
    assert "1 refused" in r.output and sidecar.name in r.output
    assert "20000 times" in r.output


def test_no_progress_bar_into_a_redirected_stderr(setup: dict[str, Path]) -> None:
    """Bars are for a terminal: a log or a pipe gets the summary lines only."""
    d = setup["dir"]
    for argv in (
        ["replay", "--config", str(setup["config"]), "--out", str(d / "r.jsonl")],
        ["export", str(d / "ring"), str(d / "train.zip")],
    ):
        r = CliRunner().invoke(app, argv)  # stderr is not a terminal here
        assert r.exit_code == 0, r.output
        for mark in ("━", "\r", "\x1b[", "0:00:"):
            assert mark not in r.stderr, (argv[0], r.stderr)
        assert r.output.endswith("\n")


def test_export_warns_of_a_class_a_split_lacks(setup: dict[str, Path]) -> None:
    """A small split export left a class out of a split, and export said nothing."""
    import zipfile

    d = setup["dir"]
    r = CliRunner().invoke(app, ["export", str(d / "ring"), str(d / "all.zip"), "-q"])
    assert r.exit_code == 0, r.output
    with zipfile.ZipFile(d / "all.zip") as z:
        ids = [it["id"] for it in json.loads(z.read("manifest.json"))["items"]]
    rows = [f"{i},{'rare' if n == 0 else 'common'}" for n, i in enumerate(ids)]
    (d / "relabels.csv").write_text("id,label\n" + "\n".join(rows) + "\n")
    argv = ["export", str(d / "ring"), str(d / "split.zip"), "--labels", str(d / "relabels.csv")]
    r = CliRunner().invoke(app, [*argv, "--split", "0.5/0.5", "-q"])
    assert r.exit_code == 0, r.output
    with zipfile.ZipFile(d / "split.zip") as z:
        rare = {n.split("/")[0] for n in z.namelist() if "/rare/" in f"/{n}"}
    (has,) = rare  # the one rare item is in one split; the other lacks the class
    lacks = "val" if has == "train" else "train"
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1, r.stderr
    assert warnings[0].startswith(
        f"cdml-edge export: warning: class 'rare' is in {has}/ but not in {lacks}/: "
    )
    assert "another --split" in warnings[0]
