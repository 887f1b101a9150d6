"""What an operator sees when the box goes wrong: ``/metrics``, ``/healthz``, the page, the log.

The real ``cdml-edge run`` process, a real folder watch and ONNX model, MQTT pointed at a port
where nothing listens (so results go to the spool). Faults made for real: the state folder on
a small tmpfs filled to the last block, a source folder replaced by a file so that its watch
dies on every restart, the disk under ``output.jsonl`` frozen (``fsfreeze``: every write
waits) so that the pipeline stalls. Each must show promptly on every surface, and go when its
cause goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg, start_agent, wait_for
from helpers.full_disk import fill, small_tmpfs
from helpers.models import brightness_classifier
from helpers.ports import free_port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def _sample(metrics: str, name: str) -> float | None:
    """The value of the sample ``name`` (with its labels, as written) in an exposition."""
    m = re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.M)
    return None if m is None else float(m.group(1))


@contextlib.contextmanager
def frozen_disk(path: Path) -> Iterator[Callable[[bool], None]]:
    """``path``: a 16 MiB ext4 on a loop device; yields ``freeze(on)`` (``fsfreeze``).

    Skipped where loop devices cannot be mounted; always thawed and unmounted afterwards.
    """
    image = path.with_name(path.name + ".img")
    image.write_bytes(b"")
    os.truncate(image, 16 << 20)
    path.mkdir()
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    mounted = made.returncode == 0 and (
        subprocess.run(["mount", "-o", "loop", str(image), str(path)], capture_output=True)
    )
    if not mounted or mounted.returncode != 0:
        pytest.skip("no loop mount of an ext4 image here")

    def freeze(on: bool) -> None:
        subprocess.run(["fsfreeze", "-f" if on else "-u", str(path)], check=on, capture_output=True)

    try:
        yield freeze
    finally:
        freeze(False)
        subprocess.run(["umount", "-l", str(path)], check=False)


def _config(tmp_path: Path, state: Path, port: int) -> Path:
    brightness_classifier(tmp_path / "b.onnx")
    (tmp_path / "in/cam").mkdir(parents=True)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        textwrap.dedent(f"""
        device: {{id: ops-{port}}}
        sources:
          - {{name: cam, path: in/cam, modality: image, stable_seconds: 0.1}}
        models: {{image: {{path: b.onnx}}}}
        mqtt: {{url: "mqtt://127.0.0.1:{free_port()}", client_id: ops-{port}}}
        state_dir: {state}
        health: {{interval: 0.3s, watchdog: false, metrics_port: {port}, status_page: true}}
    """)
    )
    return cfg


@pytest.fixture
def agent_run(tmp_path: Path) -> Iterator[tuple[str, Path, Path, subprocess.Popen[bytes]]]:
    """A running agent whose state folder is a 1 MiB tmpfs: its URL, state, log, process."""
    port = free_port()
    with small_tmpfs(tmp_path / "state", "1m") as state:
        cfg = _config(tmp_path, state, port)
        log = tmp_path / "agent.log"
        proc = start_agent(cfg, log)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
            yield url, state, log, proc
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def test_a_full_state_disk_is_exported_and_clears_when_it_has_room(
    agent_run: tuple[str, Path, Path, subprocess.Popen[bytes]],
) -> None:
    """``cdml_edge_degraded{part}`` follows ``/healthz``'s ``degraded``, both ways."""
    url, state, log, _ = agent_run
    _, metrics = _get(url + "/metrics")
    # there from the start, at 0: the first drop or fault is a change an alert sees
    assert _sample(metrics, 'cdml_edge_dropped_total{reason="spool"}') == 0
    assert _sample(metrics, 'cdml_edge_dropped_total{reason="camera_budget_full"}') == 0
    assert _sample(metrics, 'cdml_edge_degraded{part="spool"}') == 0
    for thread in ("src-cam", "windower-cam", "pipeline-0", "health"):  # deaths too
        assert _sample(metrics, f'cdml_edge_thread_deaths_total{{thread="{thread}"}}') == 0
    fill(state)  # health messages keep coming: the spool's next append fails
    wait_for(
        lambda: "spool" in json.loads(_get(url + "/healthz")[1] or "{}").get("degraded", {}),
        timeout=20,
        what="/healthz degraded: spool",
    )
    code, body = _get(url + "/healthz")
    _, metrics = _get(url + "/metrics")
    assert code == 503 and json.loads(body)["status"] == "degraded"
    assert _sample(metrics, 'cdml_edge_degraded{part="spool"}') == 1
    assert _sample(metrics, 'cdml_edge_degraded{part="retention"}') == 0
    wait_for(lambda: "degraded: spool" in log.read_text(), what="the summary line saying so")
    (state / "filler").unlink()
    wait_for(lambda: _get(url + "/healthz")[0] == 200, timeout=20, what="/healthz ok again")
    _, metrics = _get(url + "/metrics")
    assert _sample(metrics, 'cdml_edge_degraded{part="spool"}') == 0


def test_a_dead_source_is_named_in_the_summary_line_and_on_the_page(
    tmp_path: Path, agent_run: tuple[str, Path, Path, subprocess.Popen[bytes]]
) -> None:
    """The watched folder becomes a file: its thread dies on every restart, every surface says so.

    The summary line used to read as if all were well.
    """
    url, _, log, _ = agent_run
    folder = tmp_path / "in/cam"
    shutil.rmtree(folder)
    folder.write_bytes(b"")  # the watch cannot be armed again: no folder can be made here
    wait_for(lambda: _get(url + "/healthz")[0] == 503, timeout=20, what="/healthz 503")
    assert json.loads(_get(url + "/healthz")[1])["dead_threads"] == ["src-cam"]
    start = len(log.read_text())
    wait_for(
        lambda: "dead: src-cam" in log.read_text()[start:], timeout=20, what="a summary saying so"
    )
    line = next(ln for ln in log.read_text()[start:].splitlines() if "dead: src-cam" in ln)
    assert "summary: +" in line, line
    _, page = _get(url + "/")
    assert "<th>dead_threads</th><td>src-cam</td>" in page  # a name, not a Python tuple
    assert 'id="status">dead_threads<' in page
    folder.unlink()
    folder.mkdir()
    wait_for(lambda: _get(url + "/healthz")[0] == 200, timeout=60, what="/healthz ok again")
    time.sleep(1.0)  # a summary line or three later
    last = [ln for ln in log.read_text().splitlines() if "summary: +" in ln][-1]
    assert "dead:" not in last, last


def test_a_stalled_pipeline_is_said_by_every_summary_line_while_it_lasts(tmp_path: Path) -> None:
    """The output's disk freezes: windows wait, ``/healthz`` says stalled, the log goes on.

    A summary line per interval says so (it used to fall silent behind the output).
    """
    brightness_classifier(tmp_path / "b.onnx")
    (tmp_path / "in/cam").mkdir(parents=True)
    port = free_port()
    with frozen_disk(tmp_path / "out") as freeze:
        cfg = tmp_path / "agent.yaml"
        cfg.write_text(
            textwrap.dedent(f"""
            device: {{id: stall-{port}}}
            sources:
              - {{name: cam, path: in/cam, modality: image, stable_seconds: 0.1}}
            models: {{image: {{path: b.onnx}}}}
            output: {{jsonl: out/out.jsonl}}
            health: {{interval: 0.3s, watchdog: false, metrics_port: {port}, stall_after: 2s}}
        """)
        )
        log = tmp_path / "agent.log"
        proc = start_agent(cfg, log)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
            freeze(True)
            start = len(log.read_text())
            for i in range(6):
                (tmp_path / "in/cam" / f"p{i}.jpg").write_bytes(jpeg(40 * i))
            wait_for(
                lambda: json.loads(_get(url + "/healthz")[1] or "{}").get("status") == "stalled",
                timeout=30,
                what="/healthz stalled",
            )
            _, metrics = _get(url + "/metrics")
            assert _sample(metrics, "cdml_edge_watchdog_stalled") == 1
            wait_for(
                lambda: "stalled: " in log.read_text()[start:],
                timeout=10,
                what="a summary line saying the pipeline is stalled",
            )
            time.sleep(1.0)
            lines = [ln for ln in log.read_text()[start:].splitlines() if "summary: +" in ln]
            assert "stalled: " in lines[-1] and "output blocked" in lines[-1], lines[-1]
            freeze(False)
            wait_for(lambda: _get(url + "/healthz")[0] == 200, timeout=30, what="/healthz ok")
            time.sleep(1.0)
            last = [ln for ln in log.read_text().splitlines() if "summary: +" in ln][-1]
            assert "stalled" not in last and "blocked" not in last, last
        finally:
            freeze(False)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        assert proc.returncode == 0, log.read_text()[-3000:]


def test_a_stall_is_in_the_summary_line_without_a_metrics_port(tmp_path: Path) -> None:
    """Without ``health.metrics_port`` the summary line is all the operator has: it says so."""
    brightness_classifier(tmp_path / "b.onnx")
    (tmp_path / "in/cam").mkdir(parents=True)
    with frozen_disk(tmp_path / "out") as freeze:
        cfg = tmp_path / "agent.yaml"
        cfg.write_text(
            textwrap.dedent(f"""
            device: {{id: stall-noport-{os.getpid()}}}
            sources:
              - {{name: cam, path: in/cam, modality: image, stable_seconds: 0.1}}
            models: {{image: {{path: b.onnx}}}}
            output: {{jsonl: out/out.jsonl}}
            health: {{interval: 0.3s, watchdog: false, stall_after: 2s}}
        """)
        )
        log = tmp_path / "agent.log"
        proc = start_agent(cfg, log)
        try:
            wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
            freeze(True)
            start = len(log.read_text())
            for i in range(6):
                (tmp_path / "in/cam" / f"p{i}.jpg").write_bytes(jpeg(40 * i))
            wait_for(
                lambda: "stalled: " in log.read_text()[start:],
                timeout=20,
                what="a summary line saying the pipeline is stalled",
            )
        finally:
            freeze(False)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        assert proc.returncode == 0, log.read_text()[-3000:]
