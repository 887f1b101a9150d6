"""Start-up: the time of each step in the log, and a first start that compiles nothing."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.models import brightness_classifier, mfcc_anomaly

from cdml_edge.agent.app import Agent
from cdml_edge.agent.startup import process_age
from cdml_edge.config import load_config


def test_start_up_logs_each_step_and_the_time_to_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    brightness_classifier(tmp_path / "b.onnx")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        textwrap.dedent("""
        sources: [{name: cam, path: in, modality: image}]
        models: {image: {path: b.onnx}}
        quarantine: {dir: quarantine}
        output: {jsonl: out.jsonl}
        """)
    )
    caplog.set_level(logging.INFO, logger="cdml_edge")
    agent = Agent(load_config(cfg), cfg)
    agent.start()
    agent.stop()
    lines = [r.getMessage() for r in caplog.records]
    steps = [ln.split(" in ")[0] for ln in lines if ln.startswith("start-up: ")]
    assert steps == [
        "start-up: health endpoint",
        "start-up: models",
        "start-up: decoders",
        "start-up: output",
        "start-up: sources",
    ]
    assert any(ln.startswith("start-up: decoders in ") and "(image " in ln for ln in lines)
    ready = next(ln for ln in lines if ln.startswith("agent ready"))
    assert "s since the process started" in ready and "models " in ready, ready


def test_process_age_is_the_time_since_this_process_started() -> None:
    age = process_age()
    assert age is not None and 0 < age < 24 * 3600


def test_an_audio_agent_starts_without_compiling_kernels(tmp_path: Path) -> None:
    """A first start with an audio source: no numba, no librosa, no kernel cache in ``$HOME``.

    The audio decoder's MFCCs need no JIT (:mod:`cdml_edge.decode.audio_features`), so a
    board's first start is as fast as its second and writes nothing outside its folders.
    """
    mfcc_anomaly(tmp_path / "a.onnx")
    (tmp_path / "agent.yaml").write_text(
        textwrap.dedent("""
        sources: [{name: mic, path: in, modality: audio}]
        models: {audio: {path: a.onnx}}
        quarantine: {dir: quarantine}
        output: {jsonl: out.jsonl}
        """)
    )
    code = f"""
        import sys, time
        from cdml_edge.agent.app import Agent
        from cdml_edge.config import load_config
        t0 = time.monotonic()
        agent = Agent(load_config({str(tmp_path / "agent.yaml")!r}), None)
        agent.start()
        ready = time.monotonic() - t0
        agent.stop()
        print("numba" in sys.modules, "librosa" in sys.modules, ready < 10)
        """
    home = tmp_path / "home"
    home.mkdir()
    out = _run(code, {"HOME": str(home), "XDG_CACHE_HOME": "", "STATE_DIRECTORY": ""})
    assert out == "False False True"
    # (onnxruntime's import writes its own device id under ~/.cache/Microsoft; not ours)
    assert not list(home.rglob("*cdml-edge*")) and not list(home.rglob("*.nbi"))


def _run(code: str, env: dict[str, str]) -> str:
    full = dict(os.environ) | env
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_the_agent_runs_blas_on_one_thread(tmp_path: Path) -> None:
    """Loaded BLAS libraries are limited at start, and one loaded later (SciPy's) starts so."""
    brightness_classifier(tmp_path / "b.onnx")
    (tmp_path / "agent.yaml").write_text(
        textwrap.dedent("""
        sources: [{name: cam, path: in, modality: image}]
        models: {image: {path: b.onnx}}
        quarantine: {dir: quarantine}
        output: {jsonl: out.jsonl}
        """)
    )
    out = _run(
        f"""
        from threadpoolctl import threadpool_info
        from cdml_edge.agent.app import Agent
        from cdml_edge.config import load_config
        cfg = {str(tmp_path / "agent.yaml")!r}
        before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        agent = Agent(load_config(cfg), cfg)
        agent.start()
        import scipy.linalg  # noqa: F401  (its own OpenBLAS, loaded after the start)
        after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        agent.stop()
        print(before, after)
        """,
        {"OPENBLAS_NUM_THREADS": "", "OMP_NUM_THREADS": "2"},
    )
    before, after = out.splitlines()[-1].split("] [")
    assert "2" in before and set(after.strip("[]").split(", ")) == {"1"}, out
