"""A short real run of an installed cdml-edge, with the Python of the venv it is run by.

    VENV/bin/python scripts/release/board_smoke.py --models models/

The agent (``VENV/bin/cdml-edge run``) watches a folder, scores JPEGs with the shipped
``digits.onnx``, writes JSON lines, quarantines a truncated JPEG and exits 0 on SIGTERM; then
``cdml-edge pack`` and ``cdml-edge scan`` read a ZIP and a tar.zst through the native reader
and a corrupted copy is refused (exit 1). Needs only the runtime dependencies (no torch).
Prints one line per check; exit 0 when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

N_GOOD = 5
CONFIG = """\
device: {{id: board-smoke}}
state_dir: state
sources:
  - name: cam
    path: in/cam
    modality: image
    window: {{seconds: 100ms, max_items: 8}}
    on_done: delete
    stable_seconds: 200ms
pack: {{format: tar.zst, level: 3}}
models:
  image: {{path: {model}}}
health: {{interval: 200ms}}
output: {{jsonl: out.jsonl}}
"""


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            out.append(json.loads(line))
    return out


def _of(lines: list[dict], kind: str) -> list[dict]:
    return [m["payload"] for m in lines if m.get("topic", "").endswith(kind)]


def _wait(cond: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _jpeg(seed: int) -> bytes:
    img = (np.random.default_rng(seed).random((32, 32)) * 255).astype(np.uint8)
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    return buf.tobytes()


def check_agent(work: Path, models: Path, exe: Path) -> str:
    """folder -> digits.onnx -> JSON lines; a bad file quarantined; SIGTERM exits 0."""
    (work / "cfg.yaml").write_text(CONFIG.format(model=models / "digits.onnx"))
    out = work / "out.jsonl"
    log = open(work / "agent.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(exe), "run", "--config", "cfg.yaml"], cwd=work, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait(lambda: bool(_of(_lines(out), "/status")), "the agent to come online", 300)
        cam = work / "in/cam"
        for i in range(N_GOOD):
            (cam / f"{i}.jpg").write_bytes(_jpeg(i))
        (cam / "bad.jpg").write_bytes(_jpeg(99)[:200])  # truncated
        _wait(lambda: len(_of(_lines(out), "/result")) >= N_GOOD, f"{N_GOOD} results")
        _wait(lambda: bool(_of(_lines(out), "/error")), "the error of bad.jpg")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    text = (work / "agent.log").read_text()
    assert code == 0, f"exit {code} on SIGTERM:\n{text[-3000:]}"
    lines = _lines(out)
    results = _of(lines, "/result")
    assert sorted(r["item"] for r in results) == [f"{i}.jpg" for i in range(N_GOOD)], results
    assert all(isinstance(r["label"], str) for r in results), results
    errors = _of(lines, "/error")
    assert [e["item"] for e in errors] == ["bad.jpg"], errors
    assert Path(errors[0]["quarantined_path"]).is_file(), errors
    assert _of(lines, "/status")[-1]["state"] == "offline"
    return f"{len(results)} results, bad.jpg quarantined, SIGTERM exit 0"


def check_scan(work: Path, exe: Path) -> str:
    """pack + scan (native reader) of a ZIP and a tar.zst; a corrupted copy exits 1."""
    src = work / "pack"
    src.mkdir()
    for i in range(4):
        (src / f"{i}.jpg").write_bytes(_jpeg(10 + i))
    said = []
    for name in ("a.zip", "a.tar.zst"):
        arc = work / name
        subprocess.run([str(exe), "pack", str(src), str(arc)], check=True, capture_output=True)
        res = subprocess.run([str(exe), "scan", str(arc)], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "reader: native" in res.stdout, res.stdout
        data = bytearray(arc.read_bytes())
        data[len(data) // 3] ^= 0xFF
        bad = work / f"bad-{name}"
        bad.write_bytes(bytes(data))
        res = subprocess.run([str(exe), "scan", str(bad)], capture_output=True, text=True)
        assert res.returncode == 1, f"corrupted {name}: exit {res.returncode}\n{res.stdout}"
        said.append(name)
    return "scan (native reader) of " + ", ".join(said) + "; corrupted copies exit 1"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True, help="folder with digits.onnx")
    args = ap.parse_args()
    exe = Path(sys.executable).parent / "cdml-edge"
    work = Path(tempfile.mkdtemp(prefix="cdml-smoke-"))
    failed = 0
    for check in (
        lambda: check_agent(work / "agent", args.models.resolve(), exe),
        lambda: check_scan(work, exe),
    ):
        (work / "agent").mkdir(exist_ok=True)
        try:
            print("ok  ", check())
        except Exception as exc:  # noqa: BLE001 - report every check
            failed += 1
            print("FAIL", exc)
    if not failed:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("kept", work)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
