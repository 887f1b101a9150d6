"""``cdml-edge test`` scores each file exactly as ``run`` does, for every routing form.

The same files go through the agent (``cdml-edge run``, JSON lines out) and through
``cdml-edge test``; their result payloads are compared field by field. Aside: the latency
(``test`` measures it from the moment it read the file), the item time it is measured from,
the window id and the sequence number. Routing forms: a source scored by its modality's
model (the default), a source's ``models`` list, several models on one source, and a CSV
source cut into ``segment_rows`` segments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for
from helpers.models import brightness_classifier, image_classifier, level_anomaly

ROOT = Path(__file__).resolve().parents[2]
ASIDE = {"latency_ms", "ts", "window_id", "seq"}
CONFIG = """\
device: {id: same-1}
sources:
  - {name: cam-default, path: in/cam-default, modality: image, on_done: keep}
  - {name: cam-listed, path: in/cam-listed, modality: image, on_done: keep, models: [digits]}
  - {name: cam-both, path: in/cam-both, modality: image, on_done: keep, models: [image, digits]}
  - {name: vib, path: in/vib, modality: csv, on_done: keep, segment_rows: 8}
models:
  image: {path: bright.onnx}
  digits: {path: tiny.onnx, modality: image}
  csv: {path: level.onnx}
output: {jsonl: out.jsonl}
"""


def _site(tmp_path: Path) -> list[Path]:
    brightness_classifier(tmp_path / "bright.onnx")
    image_classifier(tmp_path / "tiny.onnx")
    level_anomaly(tmp_path / "level.onnx", window=8)
    (tmp_path / "factory.yaml").write_text(CONFIG)
    files = []
    for source in ("cam-default", "cam-listed", "cam-both"):
        (tmp_path / "in" / source).mkdir(parents=True)
        for i, value in enumerate((20, 130, 240)):
            files.append(tmp_path / "in" / source / f"{source}-{i}.jpg")
            files[-1].write_bytes(jpeg(value, 32))
    (tmp_path / "in" / "vib").mkdir()
    rng = np.random.default_rng(3)
    for i in range(2):
        rows = rng.normal(i, 0.3, (24, 3))  # 24 rows: three segments of 8
        text = "ax,ay,az\n" + "\n".join(",".join(f"{v:.3f}" for v in r) for r in rows) + "\n"
        files.append(tmp_path / "in" / "vib" / f"vib-{i}.csv")
        files[-1].write_text(text)
    return files


def _cli(tmp_path: Path, *args: str, **kw: Any) -> Any:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's cdml_edge
    cmd = [sys.executable, "-m", "cdml_edge.cli", *args]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, text=True, **kw)


def _by_item(payloads: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (p["source"], p["item"]): {k: v for k, v in p.items() if k not in ASIDE} for p in payloads
    }


def test_cdml_edge_test_gives_the_payloads_run_publishes(tmp_path: Path) -> None:
    files = _site(tmp_path)
    cfg = str(tmp_path / "factory.yaml")
    trial = _cli(tmp_path, "test", "--config", cfg, *map(str, files), stdout=subprocess.PIPE)
    out, _ = trial.communicate(timeout=120)
    assert trial.returncode == 0
    tried = [json.loads(line) for line in out.splitlines()]
    expected = _by_item(of_kind(tried, "/result"))
    assert len(expected) == 9 + 6  # nine images, six segments
    agent = _cli(tmp_path, "run", "--config", cfg, stderr=subprocess.PIPE)
    try:
        wait_for(
            lambda: len(of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result")) >= len(expected),
            90,
            "the agent's results",
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=60)
    got = _by_item(of_kind(read_jsonl(tmp_path / "out.jsonl"), "/result"))
    assert got.keys() == expected.keys()
    for key, payload in expected.items():
        assert got[key] == payload, key
    models = {k: p.get("models") for k, p in got.items() if k[0] == "cam-both"}
    assert all(m is not None and len(m) == 2 for m in models.values()), models


def test_latency_is_measured_from_when_test_read_the_file(tmp_path: Path) -> None:
    """A file written 8 minutes earlier showed ``latency_ms: 510900``."""
    files = _site(tmp_path)
    old = time.time() - 480
    os.utime(files[0], (old, old))
    trial = _cli(
        tmp_path,
        "test",
        "--config",
        str(tmp_path / "factory.yaml"),
        str(files[0]),
        stdout=subprocess.PIPE,
    )
    out, _ = trial.communicate(timeout=120)
    (result,) = of_kind([json.loads(line) for line in out.splitlines()], "/result")
    assert result["latency_ms"] < 60_000, result
