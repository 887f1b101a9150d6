"""What the status page costs the live path, figures from one run.

With ``health.status_page: true`` a window's processing also (a) hands the board its last
8 image items (references, no copy; thumbnails are made when the page is read) and (b)
shows each published message to the board (a JSON parse per message). This measures, for
a window of ``--items``
camera-sized JPEGs (``--side`` px) scored by a small real ONNX classifier:

* the baseline: pack + read back + decode + infer + payloads (``score_window``), the
  work every window does;
* the same plus the board's share (thumbnails and observing every message), as a ratio;
* a full decode of one image beside one thumbnail (what libjpeg's reduced decode saves),
  and rendering the page with 8 thumbnails to make (the first view) and cached.

Every figure is the best of ``--repeat`` rounds, rounds interleaved (CPU time beside wall).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from _test_helpers import borrow
from timing import interleaved, rounds, timed

borrow("models")
from helpers.models import brightness_classifier  # noqa: E402

from cdml_edge.health import ActivityBoard  # noqa: E402
from cdml_edge.health.observed import ObservedOutput  # noqa: E402
from cdml_edge.health.page import render_page  # noqa: E402
from cdml_edge.health.thumbs import thumbnail  # noqa: E402
from cdml_edge.model.runner import ModelRunner  # noqa: E402
from cdml_edge.window.items import Item, Window  # noqa: E402
from cdml_edge.window.pack import pack_window  # noqa: E402
from cdml_edge.window.payloads import item_id  # noqa: E402
from cdml_edge.window.score import score_window  # noqa: E402


class _Null:
    def start(self) -> None: ...
    def publish_batch(
        self,
        messages: object,
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        if on_durable is not None:
            on_durable()

    def stats(self) -> dict[str, int]:
        return {}

    def stop(self, timeout: float = 5.0) -> None: ...


def _window(n: int, side: int) -> Window:
    rng = np.random.default_rng(0)
    w = Window("cam-bench", "cam", time.time())
    for i in range(n):
        pixels = rng.integers(0, 255, (side * 3 // 4, side, 3), dtype=np.uint8)
        img = cv2.GaussianBlur(pixels, (0, 0), 6)  # photo-like, compresses like one
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        data = buf.tobytes()
        w.items.append(
            Item(
                "cam",
                f"{i:04d}.jpg",
                "image",
                time.time(),
                data,
                item_id("cam", f"{i:04d}.jpg", len(data), i),
                size=len(data),
            )
        )
    return w


def _first_and_cached_view(window: Window) -> tuple[float, float]:
    """Seconds to render the page with 8 thumbnails to make (the first view), then cached."""
    board = ActivityBoard("bench")
    board.keep_images(window)
    for it in window.items[-8:]:
        board.observe("result", "cam", {"item": it.name, "score": 0.5})

    def render() -> None:
        render_page(board.snapshot(), {"status": "ok"}, board.thumbnail)

    return timed(render).wall, timed(render).wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=32)
    ap.add_argument("--side", type=int, default=640)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        runner = ModelRunner.load(brightness_classifier(Path(d) / "b.onnx", size=64))
    runner.warm_up()
    runners = {"image": runner}
    window = _window(args.items, args.side)
    plain = _Null()
    observed = ObservedOutput(_Null(), ActivityBoard("bench"))

    def score(output: object, board: ActivityBoard | None) -> None:
        packed = pack_window(window, device="bench", modality="image")
        outcome = score_window(packed.archive, runners, device="bench")
        if board is not None:
            board.keep_images(window)
        output.publish_batch(outcome.messages())  # type: ignore[attr-defined]

    t = interleaved(
        {
            "baseline": lambda: score(plain, None),
            "with board": lambda: score(observed, observed.board),
        },
        args.repeat,
    )
    one = window.items[0].data
    d1 = interleaved(
        {
            "full decode": lambda: cv2.imdecode(np.frombuffer(one, np.uint8), cv2.IMREAD_COLOR),
            "thumbnail": lambda: thumbnail(one),
        },
        args.repeat * 5,
    )
    print(
        f"window of {args.items} JPEGs {args.side}x{args.side * 3 // 4}, "
        f"{sum(len(i.data) for i in window.items) / 1024:.0f} KiB, best of {args.repeat}"
    )
    base_w, base_c = t["baseline"]
    for k, (w, c) in t.items():
        print(
            f"  {k:<12} {w * 1000:8.1f} ms wall {c * 1000:8.1f} ms cpu  "
            f"ratio {w / base_w:5.3f} wall {c / base_c:5.3f} cpu"
        )
    fw, _ = d1["full decode"]
    tw, _ = d1["thumbnail"]
    print(
        f"  one image: full decode {fw * 1000:.2f} ms, thumbnail {tw * 1000:.2f} ms "
        f"(ratio {tw / fw:.2f})"
    )
    views = rounds({"page": lambda: _first_and_cached_view(window)}, args.repeat)["page"]
    first, cached = min(v[0] for v in views), min(v[1] for v in views)
    print(
        f"  status page with 8 thumbnails: first view {first * 1000:.1f} ms, "
        f"then {cached * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
