"""What the agent tests share.

Files written the way producers write them, waiting for a condition, a config for the whole
agent, and reading the JSON-lines output it writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from helpers.models import brightness_classifier


def wait_for(cond: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``cond`` until it holds; fail the test naming ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def jpeg(value: int, size: int = 32) -> bytes:
    """A flat grey JPEG of the given 0..255 value."""
    import cv2

    img = np.full((size, size, 3), value, dtype=np.uint8)
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    return buf.tobytes()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` the way a careful producer does: to ``.tmp``, then rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.rename(path)


def cam_config(tmp_path: Path, extra: str, max_items: int = 2) -> Path:
    """``tmp_path/factory.yaml``: one image folder source ``cam1`` scored by the brightness model.

    ``cam1`` watches ``in/cam1`` (created), with windows of 100 ms / ``max_items`` and
    ``on_done: delete``; plus the ``extra`` YAML sections.
    """
    brightness_classifier(tmp_path / "brightness.onnx")
    (tmp_path / "in/cam1").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "factory.yaml"
    path.write_text(
        "device: {id: edge-1}\n"
        "sources:\n"
        "  - {name: cam1, kind: folder, path: in/cam1, modality: image, on_done: delete,\n"
        f"     window: {{seconds: 100ms, max_items: {max_items}}}, stable_seconds: 0.1}}\n"
        "models:\n"
        "  image: {path: brightness.onnx}\n" + extra
    )
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file the agent may be writing.

    A last line without its newline is still being written and is not read yet.
    """
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    out = []
    for line in lines[:-1]:  # the part after the last newline is not a line yet
        if line.strip():
            out.append(json.loads(line))
    return out


def of_kind(lines: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    return [m["payload"] for m in lines if m["topic"].endswith(suffix)]


def write_config(tmp_path: Path, **opts: Any) -> Path:
    """``tmp_path/agent.yaml``: an image folder source ``cam`` and a CSV one ``vib``.

    Scored by ``models/brightness.onnx`` and ``models/level.onnx`` (the ``models`` fixture of
    ``tests/agent``), JSON lines to ``out.jsonl``.
    """
    text = f"""
    device: {{id: test-dev}}
    sources:
      - name: cam
        kind: folder
        path: in/cam
        modality: image
        window: {{seconds: 50ms, max_items: 8}}
        on_done: delete
        stable_seconds: 0.2
      - name: vib
        kind: folder
        path: in/vib
        modality: csv
        window: {{seconds: 50ms, max_items: 1}}
        on_done: move
        move_to: done/vib
    pack: {{format: {opts.get("fmt", "zip")}, level: 3}}
    models:
      image: {{path: models/brightness.onnx}}
      csv: {{path: models/level.onnx}}
    quarantine: {{dir: quarantine}}
    limits: {{max_inflight_bytes: {opts.get("inflight", "8MiB")}}}
    health: {{interval: 0.2s}}
    output: {{jsonl: out.jsonl}}
    """
    if opts.get("retention"):
        text += "retention: {dir: ret, max_bytes: 10MiB}\n"
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(textwrap.dedent(text))
    return cfg


class FailingSession:
    """The real onnxruntime session, made to raise on its first ``fail`` runs."""

    def __init__(self, real: Any, fail: int) -> None:
        self.real, self.fail, self.calls = real, fail, 0

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.fail:
            raise RuntimeError(f"injected model failure {self.calls}")
        return self.real.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def start_agent(
    cfg: Path, log: Path, *, cwd: Path | None = None, prefix: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """``cdml-edge run --config cfg`` of this checkout, its own process; its output to ``log``.

    ``prefix``: a command it runs under (``unshare ...``).
    """
    from helpers.paths import ROOT

    with open(log, "wb") as sink:
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "cdml_edge.cli", "run", "--config", str(cfg)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
