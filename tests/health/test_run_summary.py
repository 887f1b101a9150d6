"""``cdml-edge run`` logs one summary line per health interval and one at exit.

The real command over a real folder and real ONNX models.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier, level_anomaly

from cdml_edge.health.summary import RunSummary
from cdml_edge.window.payloads import HealthPayload

EXE = shutil.which("cdml-edge", path=str(Path(sys.executable).parent))


def _csv(level: float) -> bytes:
    return ("ax,ay,az\n" + "\n".join(f"{level},{level},{level}" for _ in range(8)) + "\n").encode()


@pytest.mark.slow  # the real `cdml-edge run` process over several health intervals
def test_run_logs_a_summary_per_interval_and_one_at_exit(tmp_path: Path) -> None:
    brightness_classifier(tmp_path / "b.onnx")
    level_anomaly(tmp_path / "l.onnx", window=8)
    (tmp_path / "cam").mkdir()
    (tmp_path / "vib").mkdir()
    for i, v in enumerate([10, 240, 30]):
        (tmp_path / "cam" / f"{i}.jpg").write_bytes(jpeg(v))
    (tmp_path / "vib" / "quiet.csv").write_bytes(_csv(0.0))
    (tmp_path / "vib" / "loud.csv").write_bytes(_csv(1.0))
    (tmp_path / "vib" / "cut.csv").write_bytes(b"ax,ay,az\n1,2\n")
    (tmp_path / "a.yaml").write_text(
        textwrap.dedent("""
        sources:
          - {name: cam, path: cam, modality: image, stable_seconds: 0.1}
          - {name: vib, path: vib, modality: csv, stable_seconds: 0.1}
        models: {image: {path: b.onnx}, csv: {path: l.onnx}}
        health: {interval: 0.5s, watchdog: false}
        output: {jsonl: out.jsonl}
    """)
    )
    assert EXE is not None
    res = subprocess.run(
        [EXE, "run", "--config", str(tmp_path / "a.yaml"), "--duration", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "summary: +" in ln]
    assert len(lines) >= 3, res.stderr  # about one per 0.5 s after start-up
    taken = sum(int(m.group(1)) for ln in lines if (m := re.search(r"\+(\d+) items", ln)))
    assert taken <= 6
    final = [ln for ln in res.stderr.splitlines() if "stopped after" in ln]
    assert len(final) == 1, res.stderr
    assert re.search(
        r"stopped after \d+\.\d s: 6 items \(\d+\.\d/s\), \d+ windows, "
        r"1 anomalies, 1 errors, 0 dropped; outbox 0, spool 0 records \(0 B on disk\), "
        r"written \d",
        final[0],
    ), final[0]
    assert "broker" not in final[0]  # no MQTT configured: nothing said about a broker


def test_summary_lines_count_since_the_last_line() -> None:
    t = [100.0]
    s = RunSummary(clock=lambda: t[0])

    def health(items: int, windows: int, errors: int) -> HealthPayload:
        return HealthPayload(
            items=items,
            windows=windows,
            errors=errors,
            seq=1,
            device="d",
            spool_bytes=2048,
            spool_records=3,
            outbox_depth=5,
        )

    t[0] = 110.0
    assert s.interval(health(50, 5, 1), 2, mqtt=True) == (
        "summary: +50 items (5.0/s), +5 windows, +2 anomalies, +1 errors, +0 dropped; "
        "outbox 5, spool 3 records (2.0 KiB on disk), written 0 B, broker not connected"
    )
    t[0] = 120.0
    assert s.interval(health(150, 9, 1), 2, mqtt=False).startswith(
        "summary: +100 items (10.0/s), +4 windows, +0 anomalies, +0 errors"
    )
    assert s.final(health(150, 9, 1), 2, mqtt=False).startswith(
        "stopped after 20.0 s: 150 items (7.5/s), 9 windows, 2 anomalies, 1 errors"
    )
