"""A camera window the output refused stays in the retention ring: its frames come no more.

A window the output refuses as a whole is withdrawn from the ring because its files are
taken again and kept with the window that is delivered. Camera frames live in memory only
(items without a path): nothing takes them again, so the ring held their only copy, and
withdrawing it lost them. Only a window whose every item will come again is withdrawn.

The pipeline's own decision, with a real ring on a real folder and the real retry policy;
the output raises ENOSPC as a full disk under ``output.jsonl`` does. A window of files is
withdrawn: tests/agent/test_retention_once_across_retries.py, through a real agent.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cdml_edge.agent.pipeline import WindowPipeline
from cdml_edge.agent.retry import Attempts, WindowRetryPolicy
from cdml_edge.store.retention import RetentionRing
from cdml_edge.window.manifest import WindowManifest


class _Counter:
    def labels(self, **_: Any) -> _Counter:
        return self

    def inc(self, *_: Any) -> None:
        pass


class _FullDisk:
    def publish_batch(self, *_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")


class _Source:
    def __init__(self) -> None:
        self.retried: list[str] = []

    def retry(self, path: Path, delay: float) -> None:
        self.retried.append(str(path))

    def pause(self, seconds: float) -> None:
        pass


def _refused_once(tmp_path: Path, paths: list[Path | None]) -> tuple[RetentionRing, _Source]:
    ring = RetentionRing(tmp_path / "ring", max_bytes=1 << 20, fsync=False)
    src = _Source()
    stopped = threading.Event()
    stopped.set()
    sources: Any = {"cam": src}
    metrics: Any = SimpleNamespace(errors=_Counter())
    nothing: Any = None
    retry = WindowRetryPolicy(sources, nothing, nothing, metrics, Attempts(), stopped)
    manifest = WindowManifest(
        window_id="w1", device="d", source="cam", modality="image", opened_at=1.0, closed_at=2.0
    )
    outcome = SimpleNamespace(results=[], failures=[], manifest=manifest, messages=lambda mode: [])
    items = [
        SimpleNamespace(path=p, item_id=f"i{k}", name=f"f{k}.jpg") for k, p in enumerate(paths)
    ]
    window: Any = SimpleNamespace(
        source="cam", items=items, window_id="w1", closed_ts=2.0, take_charge=lambda: 0
    )
    cfg: Any = SimpleNamespace(
        sources=[SimpleNamespace(name="cam", on_done="delete", move_to=None)],
        results_mode=lambda: "all",
    )
    output: Any = _FullDisk()
    budget: Any = SimpleNamespace(release=lambda n: None)
    pipeline: Any = WindowPipeline(
        cfg=cfg,
        runners={},
        output=output,
        budget=budget,
        sources=sources,
        lifecycle=nothing,
        metrics=metrics,
        errors=nothing,
        attempts=Attempts(),
        retry=retry,
        done=lambda: None,
        retention=ring,
    )

    def score(w: Any, sc: Any) -> tuple[Any, list[Any], bool]:
        assert ring.store(b"PK\x05\x06" + bytes(18), manifest).stored
        return outcome, [], False

    pipeline._score = score
    pipeline._handle(window)
    return ring, src


def test_a_camera_window_the_output_refused_stays_in_the_ring(tmp_path: Path) -> None:
    ring, src = _refused_once(tmp_path, [None, None, None])
    try:
        assert src.retried == []  # frames are not taken again
        assert [r.window_id for r in ring.windows()] == ["w1"], "the frames' only copy went"
    finally:
        ring.close()
