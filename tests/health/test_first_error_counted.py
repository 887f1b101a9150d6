"""The first error of a stage is an increase Prometheus sees.

A counter series that first appears with its first error already counted (``1``) has no
earlier sample: ``increase()`` and ``rate()`` see nothing, so an alert or a panel on errors
missed the first bad file, the first refused reload, the first refused window. The stages an
agent always has are exported at 0 from the start, as the ``dropped`` reasons are. The real
``cdml-edge run`` process, a real folder, real files, scraped over HTTP.
"""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.request
from pathlib import Path

from helpers.agent_runs import jpeg, start_agent, wait_for, write_atomic
from helpers.models import brightness_classifier
from helpers.ports import free_port


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def _errors(metrics: str, stage: str) -> float | None:
    m = re.search(rf'^cdml_edge_errors_total{{stage="{stage}"}} (\S+)$', metrics, re.M)
    return None if m is None else float(m.group(1))


def test_error_stages_are_there_at_0_before_the_first_error(tmp_path: Path) -> None:
    brightness_classifier(tmp_path / "b.onnx")
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    port = free_port()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        "device: {id: first-error}\n"
        "sources:\n  - {name: cam, path: in/cam, modality: image, stable_seconds: 0.1}\n"
        "models: {image: {path: b.onnx}}\n"
        f"state_dir: {tmp_path / 'state'}\n"
        f"output: {{jsonl: {tmp_path / 'out.jsonl'}}}\n"
        f"health: {{interval: 0.3s, watchdog: false, metrics_port: {port}}}\n"
    )
    log = tmp_path / "agent.log"
    proc: subprocess.Popen[bytes] = start_agent(cfg, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
        first = _metrics(url)
        for stage in ("read", "decode", "output", "pipeline", "reload", "window_retries"):
            assert _errors(first, stage) == 0, stage
        write_atomic(cam / "good.jpg", jpeg(90))
        write_atomic(cam / "cut.jpg", b"\xff\xd8 a cut-off upload")
        wait_for(lambda: _errors(_metrics(url), "decode") == 1, timeout=30, what="decode 1")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
