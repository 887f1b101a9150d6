"""Frames a camera skips while intake is paused are counted as such, not as a full budget.

A real capture process plays a real video file; the budget has room for every frame.
"""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np

from cdml_edge.intake import CameraSource, CameraSpec
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.window.items import Item


def _video(path: Path, frames: int) -> Path:
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 25, (64, 48))
    assert vw.isOpened()
    for n in range(frames):
        vw.write(np.full((48, 64, 3), (n * 20) % 256, dtype=np.uint8))
    vw.release()
    return path


def _error(source: str, name: str | None, exc: Exception, path: Path | None) -> None:
    raise AssertionError(f"a camera frame reported as a bad input: {exc}")


def test_frames_skipped_while_paused_have_their_own_counter(tmp_path: Path) -> None:
    """They were counted in ``skipped``: health said ``camera_budget_full`` for a pause."""
    video = _video(tmp_path / "clip.avi", frames=6)
    items: list[Item] = []
    lock = threading.Lock()

    def sink(item: Item) -> None:
        with lock:
            items.append(item)

    budget = ByteBudget(10**8)
    cam = CameraSource(CameraSpec("cam", str(video), fps=200), budget, sink, _error)
    cam.pause(True)  # the agent's pause after a failed window: every frame is skipped
    cam.start()
    assert cam.finished.wait(30)
    cam.stop()
    assert items == [] and budget.refused == 0
    assert (cam.stats.taken, cam.stats.skipped) == (0, 0)  # no budget refused any
    assert cam.stats.paused_skipped == 6
    assert cam.stats.drops() == {"camera_budget_full": 0, "camera_paused_skipped": 6}
    assert cam.health().frames == 6  # every frame received is counted somewhere


def test_a_full_budget_still_counts_as_budget_full(tmp_path: Path) -> None:
    video = _video(tmp_path / "clip.avi", frames=5)
    items: list[Item] = []
    cam = CameraSource(CameraSpec("cam", str(video), fps=200), ByteBudget(1), items.append, _error)
    cam.start()
    assert cam.finished.wait(30)
    cam.stop()
    # the first frame is admitted on an empty budget and never released: the rest refused
    assert len(items) == 1
    assert cam.stats.drops() == {"camera_budget_full": 4, "camera_paused_skipped": 0}
