"""Start-up: the time of each step in the log, and where numba caches librosa's kernels."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.models import brightness_classifier

from cdml_edge.agent.app import Agent
from cdml_edge.agent.startup import process_age
from cdml_edge.config import load_config
from cdml_edge.decode import numba_cache


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


def test_cache_folder_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert numba_cache.default_dir() == tmp_path / "xdg" / "cdml-edge" / "numba"
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path}/state:{tmp_path}/state/replay")
    assert numba_cache.default_dir() == tmp_path / "state" / "numba"


def _run(code: str, env: dict[str, str]) -> str:
    full = {k: v for k, v in os.environ.items() if k != numba_cache.ENV} | env
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_librosa_is_imported_with_the_cache_in_the_state_folder(tmp_path: Path) -> None:
    """Not inside site-packages: under $STATE_DIRECTORY, or where NUMBA_CACHE_DIR says."""
    code = """
        import os
        from cdml_edge.decode.audio import import_librosa
        import_librosa()
        print(os.environ["NUMBA_CACHE_DIR"])
        """
    assert _run(code, {"STATE_DIRECTORY": str(tmp_path)}) == str(tmp_path / "numba")
    mine = tmp_path / "mine"
    assert _run(code, {"STATE_DIRECTORY": str(tmp_path), "NUMBA_CACHE_DIR": str(mine)}) == str(mine)


def test_kernels_compile_once_into_the_configured_folder(tmp_path: Path) -> None:
    """A cached numba kernel lands in the folder configure() chose, which then counts as warm.

    That holds with numba already imported too; an unwritable folder falls back to one under
    the temporary folder instead of breaking the import.
    """
    (tmp_path / "kern.py").write_text(
        textwrap.dedent("""
        import numba

        @numba.njit(cache=True)
        def twice(x):
            return 2 * x
        """)
    )
    cache = tmp_path / "cache"
    code = f"""
        import sys
        import numba
        from cdml_edge.decode import numba_cache
        assert not numba_cache.is_warm({str(cache)!r})
        numba_cache.configure({str(cache)!r})
        sys.path.insert(0, {str(tmp_path)!r})
        import kern
        assert kern.twice(21) == 42
        print(numba_cache.is_warm({str(cache)!r}))
        """
    assert _run(code, {"STATE_DIRECTORY": ""}) == "True"
    assert list(cache.rglob("*.nbi"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = _run(
        f"""
        from cdml_edge.decode import numba_cache
        print(numba_cache.configure({str(blocker / "numba")!r}))
        """,
        {},
    )
    assert out.startswith("/") and "cdml-edge-numba-" in out


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
