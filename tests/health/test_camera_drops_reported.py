"""Camera frames dropped while intake is paused reach ``cdml_edge_dropped_total`` as such.

Before, every skipped frame was ``camera_budget_full``, a pause included; a folder source's
counters are not camera drops at all.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
from prometheus_client import generate_latest

from cdml_edge.health.cameras import CameraBoard
from cdml_edge.health.metrics import Metrics
from cdml_edge.health.reporter import HealthReporter
from cdml_edge.intake import CameraSource, CameraSpec
from cdml_edge.intake.base import SourceStats
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.window.topics import Sequencer


def _video(path: Path, frames: int) -> Path:
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 25, (64, 48))
    assert vw.isOpened()
    for n in range(frames):
        vw.write(np.full((48, 64, 3), n * 20, dtype=np.uint8))
    vw.release()
    return path


class _Folder:
    """What the reporter reads of a folder source: its counters."""

    def __init__(self) -> None:
        self.stats = SourceStats(skipped=9)


def _dropped(m: Metrics, reason: str) -> float:
    text = generate_latest(m.registry).decode()
    line = f'cdml_edge_dropped_total{{reason="{reason}"}} '
    return next(float(x[len(line) :]) for x in text.splitlines() if x.startswith(line))


def test_paused_frames_are_their_own_drop_reason(tmp_path: Path) -> None:
    cam = CameraSource(
        CameraSpec("cam", str(_video(tmp_path / "c.avi", 6)), fps=200),
        ByteBudget(10**8),
        lambda item: None,
        lambda *a: None,
    )
    cam.pause(True)
    cam.start()
    assert cam.finished.wait(30)
    cam.stop()
    m = Metrics()
    rep = HealthReporter(m, Sequencer(), time.time())
    rep._sources = {"cam": cam, "folder": _Folder()}  # type: ignore[dict-item]
    rep._count_skipped_frames()
    rep._count_skipped_frames()  # counted once: only what is new since the last report
    assert _dropped(m, "camera_paused_skipped") == 6
    assert _dropped(m, "camera_budget_full") == 0


def test_a_camera_lag_reaches_the_payload_and_the_metrics(tmp_path: Path) -> None:
    """The capture's lag behind the stream's clock: in ``cameras`` and as two metrics."""
    cam = CameraSource(
        CameraSpec("cam", str(_video(tmp_path / "c.avi", 1)), fps=200),
        ByteBudget(10**8),
        lambda item: None,
        lambda *a: None,
    )
    m = Metrics()
    board = CameraBoard(m)
    board.attach({"cam": cam})
    text = generate_latest(m.registry).decode()
    assert 'cdml_edge_camera_lag_seconds{source="cam"} -1.0' in text  # no figure yet
    assert cam.status.lag(2.5) == "behind"
    h = board.report()["cam"]
    assert (h.lag_s, h.fell_behind) == (2.5, 1)
    text = generate_latest(m.registry).decode()
    assert 'cdml_edge_camera_lag_seconds{source="cam"} 2.5' in text
    assert 'cdml_edge_camera_fell_behind_total{source="cam"} 1.0' in text
