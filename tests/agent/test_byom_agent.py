"""Foreign models through the agent, ``replay``, ``config validate``, ``doctor`` and payloads.

The running agent on real folders with real onnxruntime; ``replay`` local and on Ray; the
payload schema. The models: a detector and a classifier on one camera, a scikit-learn
classifier and anomaly scorer on CSV rows, an embedding model with prototypes from two folders.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers.agent_runs import wait_for, write_atomic
from helpers.byom_models import (
    channel_embedder,
    image_png,
    sklearn_csv_classifier,
    sklearn_isolation_forest,
    torch_colour_classifier,
    yolo_v8_detector,
)
from typer.testing import CliRunner

from cdml_edge.agent.app import Agent
from cdml_edge.cli import app
from cdml_edge.config import load_config
from cdml_edge.window.payloads import payload_schemas

CONFIG = """\
    device: {id: edge-1}
    sources:
      - {name: cam, path: in/cam, modality: image, models: [det, colour], on_done: keep,
         window: {seconds: 100ms, max_items: 4}, stable_seconds: 0.1}
      - {name: line, path: in/line, modality: csv, models: [csv], on_done: keep,
         window: {seconds: 100ms, max_items: 4}, stable_seconds: 0.1}
      - {name: motor, path: in/motor, modality: csv, models: [forest], on_done: keep,
         window: {seconds: 100ms, max_items: 4}, stable_seconds: 0.1}
      - {name: parts, path: in/parts, modality: image, models: [parts], on_done: keep,
         window: {seconds: 100ms, max_items: 4}, stable_seconds: 0.1}
    models:
      det:
        path: yolo.onnx
        modality: image
        labels: [person, box]
        input: {resize: letterbox}
        output: {kind: detector, score_threshold: 0.25, iou_threshold: 0.5}
      colour:
        path: colour.onnx
        modality: image
        labels_file: colours.txt
        output: {kind: classifier, top_k: 2}
      csv:
        path: clf.onnx
        labels: [cold, hot]
        input: {columns: [temp, vib]}
        output: {kind: classifier, name: probabilities}
      forest:
        path: forest.onnx
        modality: csv
        input: {columns: [temp, vib]}
        output: {kind: anomaly, name: scores, anomaly_when: below}
        anomaly_threshold: 0.0
      parts:
        path: emb.onnx
        modality: image
        input: {size: 16}
        output:
          kind: embedding
          examples: {red: examples/red, blue: examples/blue}
          percentile: 100
    retention: {dir: ring, max_bytes: 64MiB}
    output: {jsonl: out.jsonl}
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _make(tmp_path: Path) -> Path:
    yolo_v8_detector(tmp_path / "yolo.onnx")
    torch_colour_classifier(tmp_path / "colour.onnx")
    (tmp_path / "colours.txt").write_text("red\ngreen\nblue\n")
    sklearn_csv_classifier(tmp_path / "clf.onnx")
    sklearn_isolation_forest(tmp_path / "forest.onnx")
    channel_embedder(tmp_path / "emb.onnx")
    for i, shade in enumerate((200, 220, 240)):
        image_png(tmp_path / f"examples/red/r{i}.png", (shade, 10, 10), 20, 20)
        image_png(tmp_path / f"examples/blue/b{i}.png", (10, 10, shade), 20, 20)
    for name in ("cam", "line", "motor", "parts"):
        (tmp_path / "in" / name).mkdir(parents=True)
    path = tmp_path / "factory.yaml"
    path.write_text(textwrap.dedent(CONFIG))
    return path


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    return _make(tmp_path)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The configuration after the agent scored one input of each source (and kept them)."""
    setup = _make(tmp_path_factory.mktemp("byom"))
    d = setup.parent
    r = CliRunner().invoke(app, ["config", "validate", str(setup)])
    assert r.exit_code == 0, r.output
    agent = Agent(load_config(setup), setup)
    agent.start()
    try:
        _drop_inputs(d)
        wait_for(
            lambda: (
                sum(
                    len(_results(_lines(d / "out.jsonl"), s))
                    for s in ("cam", "line", "motor", "parts")
                )
                >= 7
            ),
            timeout=60,
            what="results of every source",
        )
        wait_for(
            lambda: (
                agent.retention is not None
                and sum(w.n_items for w in agent.retention.windows()) >= 7
            ),
            timeout=30,
            what="the windows retained",
        )
    finally:
        agent.stop()
    return setup


def _results(lines: list[dict[str, Any]], source: str) -> dict[str, dict[str, Any]]:
    return {
        m["payload"]["item"]: m["payload"]
        for m in lines
        if m["topic"] == f"cdml/edge-1/{source}/result"
    }


def _drop_inputs(d: Path) -> None:
    image_png(d / "in/cam/wide.png.tmp", (200, 30, 30), 128, 64)
    (d / "in/cam/wide.png.tmp").rename(d / "in/cam/wide.png")
    write_atomic(d / "in/line/hot.csv", b"temp,vib\n91.5,0.4\n")
    write_atomic(d / "in/line/cold.csv", b"temp,vib\n4.0,0.6\n")
    write_atomic(d / "in/motor/usual.csv", b"temp,vib\n20.1,0.51\n")
    write_atomic(d / "in/motor/odd.csv", b"temp,vib\n95.0,4.0\n")
    image_png(d / "in/parts/red.png.tmp", (230, 10, 10), 20, 20)
    (d / "in/parts/red.png.tmp").rename(d / "in/parts/red.png")
    image_png(d / "in/parts/green.png.tmp", (10, 230, 10), 20, 20)
    (d / "in/parts/green.png.tmp").rename(d / "in/parts/green.png")


def _check_live(lines: list[dict[str, Any]]) -> None:
    import jsonschema

    cam = _results(lines, "cam")["wide.png"]
    # the detector comes first: its best detection is the label, its boxes are in the
    # 128 x 64 source image's pixels (letterboxed into 64 x 64: scale 0.5, 16 px bars)
    assert (cam["model"], cam["label"], cam["score"]) == ("det", "person", pytest.approx(0.9))
    assert [(d["label"], d["box"]) for d in cam["detections"]] == [
        ("person", [48.0, 16.0, 80.0, 48.0]),
        ("box", [48.0, 16.0, 80.0, 48.0]),
    ]
    assert set(cam["models"]) == {"det", "colour"}
    colour = cam["models"]["colour"]
    assert colour["kind"] == "classifier" and colour["label"] == "red"
    assert [t["label"] for t in colour["top_k"]] == ["red", "green"]
    window = next(m["payload"] for m in lines if m["topic"] == "cdml/edge-1/cam/window")
    assert window["counts"] == {"person": 1, "box": 1}
    assert window["models"] == {"det": {"person": 1, "box": 1}, "colour": {"red": 1}}
    line = _results(lines, "line")
    assert (line["hot.csv"]["label"], line["cold.csv"]["label"]) == ("hot", "cold")
    assert "models" not in line["hot.csv"] and "detections" not in line["hot.csv"]
    motor = _results(lines, "motor")
    assert (motor["usual.csv"]["label"], motor["usual.csv"]["anomaly"]) == ("normal", False)
    assert (motor["odd.csv"]["label"], motor["odd.csv"]["anomaly"]) == ("anomaly", True)
    assert motor["odd.csv"]["anomaly_score"] < 0 < motor["usual.csv"]["anomaly_score"]
    parts = _results(lines, "parts")
    assert (parts["red.png"]["label"], parts["red.png"]["anomaly"]) == ("red", False)
    assert parts["green.png"]["anomaly"] is True  # far from both prototypes
    schemas = payload_schemas()
    for m in lines:
        kind = m["topic"].rsplit("/", 1)[1]
        if kind in ("result", "window"):
            jsonschema.validate(m["payload"], schemas[kind])


def test_foreign_models_run_live(live: Path) -> None:
    _check_live(_lines(live.parent / "out.jsonl"))


def test_replay_scores_them_as_live(live: Path) -> None:
    d = live.parent
    r = CliRunner().invoke(
        app, ["replay", "--config", str(live), "--out", str(d / "replay.jsonl"), "-q"]
    )
    assert r.exit_code == 0, r.output
    assert "0 labels and 0 anomaly flags changed" in r.output
    replayed = {doc["item"]: doc for doc in _lines(d / "replay.jsonl")}
    live_cam = _results(_lines(d / "out.jsonl"), "cam")["wide.png"]
    assert replayed["wide.png"]["detections"] == live_cam["detections"]
    assert replayed["wide.png"]["models"] == live_cam["models"]
    assert replayed["hot.csv"]["label"] == "hot" and replayed["green.png"]["anomaly"] is True
    assert replayed["odd.csv"]["anomaly"] is True and replayed["usual.csv"]["anomaly"] is False


@pytest.mark.slow  # a local Ray cluster, like tests/retrain/fleet/
@pytest.mark.usefixtures("ray_cluster")
def test_fleet_replay_gives_the_local_lines(live: Path) -> None:
    import pyarrow.parquet as pq

    d = live.parent
    r = CliRunner().invoke(
        app, ["replay", "--config", str(live), "--out", str(d / "local.jsonl"), "-q"]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        app,
        [
            "replay",
            "--config",
            str(live),
            "--engine",
            "ray",
            "--out",
            str(d / "fleet.parquet"),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    table = pq.read_table(d / "fleet.parquet").to_pylist()
    table.sort(key=lambda row: (row["closed_at"], row["window_id"], row["position"]))
    assert "".join(row["record"] + "\n" for row in table) == (d / "local.jsonl").read_text()


def test_payload_schema_documents_the_new_fields() -> None:
    r = CliRunner().invoke(app, ["config", "schema", "--payloads"])
    assert r.exit_code == 0, r.output
    schemas = json.loads(r.output)
    props = schemas["result"]["properties"]
    assert {"top_k", "detections", "models"} <= set(props)
    assert "models" in schemas["window"]["properties"]


def test_validate_names_what_does_not_fit(setup: Path) -> None:
    text = setup.read_text().replace("labels_file: colours.txt", "labels: [red, green]")
    text = text.replace(
        "examples: {red: examples/red, blue: examples/blue}",
        "examples: {red: examples/red, blue: examples/none}",
    )
    setup.write_text(text)
    r = CliRunner().invoke(app, ["config", "validate", str(setup)])
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "models.colour.path: cannot be loaded" in out
    assert "labels: 2 labels for the 3 classes of output 'scores'" in out
    assert "models.parts.output.examples.blue:" in out and "example folder not found" in out


def test_validate_names_a_missing_label_file(setup: Path) -> None:
    (setup.parent / "colours.txt").unlink()
    r = CliRunner().invoke(app, ["config", "validate", str(setup)])
    assert r.exit_code == 2
    assert "models.colour.labels_file: " in r.output and "colours.txt does not exist" in r.output


def test_a_source_naming_a_model_of_another_modality_is_refused(setup: Path) -> None:
    setup.write_text(setup.read_text().replace("models: [parts]", "models: [csv]"))
    r = CliRunner().invoke(app, ["config", "validate", str(setup)])
    assert r.exit_code == 2
    assert "sources[3].models: 'csv' is a csv model; the source gives image" in r.output


def test_doctor_runs_each_foreign_model_and_names_a_mismatch(setup: Path) -> None:
    setup.write_text(setup.read_text() + "mqtt: {url: 'mqtt://127.0.0.1:1883'}\n")
    r = CliRunner().invoke(app, ["doctor", "--config", str(setup), "--json", "--ascii"])
    checks = {c["name"]: c for c in json.loads(r.output)}
    assert checks["model det"]["ok"] and "(detector, yolo.onnx)" in checks["model det"]["detail"]
    assert "ran a 1x32x32x3 uint8 zero input" in checks["model colour"]["detail"]
    assert checks["model parts"]["ok"] and "embedding" in checks["model parts"]["detail"]
    setup.write_text(
        setup.read_text().replace(
            "input: {resize: letterbox}", "input: {resize: letterbox, size: 320}"
        )
    )
    r = CliRunner().invoke(app, ["doctor", "--config", str(setup), "--json", "--ascii"])
    assert r.exit_code == 1
    det = {c["name"]: c for c in json.loads(r.output)}["model det"]
    assert not det["ok"] and "the graph's 'images' is 1x3x64x64" in det["detail"]
    assert "N x 3x320x320 NCHW" in det["detail"]
