"""The status page (``health.status_page``), in a real browser and on its own.

A running agent fed real files (real folder watch, real ONNX models), the page read by a real
headless Chromium, screenshot taken; and the board and page on their own (bounds, escaping, off
by default).
"""

from __future__ import annotations

import os
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.agent_runs import wait_for, write_atomic
from helpers.browser import dump_dom, screenshot
from helpers.models import brightness_classifier, level_anomaly

from cdml_edge.agent.app import Agent
from cdml_edge.config import ConfigError, load_config
from cdml_edge.health import ActivityBoard
from cdml_edge.health.board import MAX_IMAGE_BYTES, MAX_RESULTS, MAX_SCORES, MAX_THUMBS
from cdml_edge.health.observed import ObservedOutput
from cdml_edge.health.page import render_page, sparkline
from cdml_edge.health.thumbs import THUMB_SIDE, thumbnail
from cdml_edge.outputs.factory import TeeOutput, leaves
from cdml_edge.outputs.jsonl import JsonlOutput
from cdml_edge.window.items import Item, Window


def part_photo(value: int, seed: int, size: int = 320) -> bytes:
    """A JPEG that looks like a part on a belt: a disc and a bar over a flat background."""
    rng = np.random.default_rng(seed)
    img = np.full((size, size, 3), value, np.uint8)
    centre = (int(rng.integers(100, 220)), int(rng.integers(100, 220)))
    cv2.circle(img, centre, 70, (int(255 - value), 120, int(value)), -1)
    cv2.rectangle(img, (30, 250), (290, 280), (40, 160, 200), -1)
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    return buf.tobytes()


def _csv(level: float) -> bytes:
    rows = np.full((8, 3), level)
    return ("ax,ay,az\n" + "\n".join(",".join(f"{v:.2f}" for v in r) for r in rows) + "\n").encode()


def _config(tmp_path: Path, page: bool = True) -> Path:
    brightness_classifier(tmp_path / "brightness.onnx")
    level_anomaly(tmp_path / "level.onnx", window=8)
    text = f"""
    device: {{id: line-3}}
    sources:
      - {{name: cam, path: in/cam, modality: image, stable_seconds: 0.1,
          window: {{seconds: 50ms, max_items: 8}}}}
      - {{name: vib, path: in/vib, modality: csv, stable_seconds: 0.1,
          window: {{seconds: 50ms, max_items: 4}}}}
    models:
      image: {{path: brightness.onnx}}
      csv: {{path: level.onnx}}
    health: {{interval: 0.2s, metrics_port: 0, status_page: {str(page).lower()}}}
    output: {{jsonl: out.jsonl}}
    """
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(textwrap.dedent(text))
    for d in ("in/cam", "in/vib"):
        (tmp_path / d).mkdir(parents=True)
    return cfg


def _get(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_the_page_shows_what_the_running_agent_scored_in_a_real_browser(tmp_path: Path) -> None:
    cfg_path = _config(tmp_path)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        assert agent._server is not None and agent._server.host == "127.0.0.1"  # loopback
        url = agent._server.url + "/"
        cam, vib = tmp_path / "in/cam", tmp_path / "in/vib"
        for i in range(6):
            write_atomic(cam / f"part-{i:03d}.jpg", part_photo(40 if i % 3 else 220, i))
        for i, level in enumerate([0.0, 0.1, 0.0, 1.0, 0.05, 0.0]):
            write_atomic(vib / f"axis-{i:03d}.csv", _csv(level))
        write_atomic(cam / "part-bad.jpg", b"\xff\xd8 a cut-off upload")
        wait_for(
            lambda: (
                agent.view is not None
                and agent.view.snapshot()["sources"].get("cam", {}).get("items", 0) >= 6
                and agent.view.snapshot()["sources"].get("vib", {}).get("items", 0) >= 6
                and agent.view.errors
            ),
            timeout=30,
            what="12 results and an error on the board",
        )
        for item in ("part-000.jpg", "part-005.jpg"):  # sources are released after output
            wait_for(
                lambda item=item: (
                    agent.view is not None and agent.view.thumbnail("cam", item) is not None
                ),
                what="thumbnails",
            )
        code, headers, body = _get(url)
        assert code == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert "http://" not in body.replace(agent._server.url, "")  # nothing from elsewhere
        assert "<script" not in body
        dom = dump_dom(url, tmp_path / "profile")
        assert 'id="source-cam"' in dom and 'id="source-vib"' in dom
        assert "part-005.jpg" in dom and "axis-003.csv" in dom
        assert dom.count('src="data:image/jpeg;base64,') >= 6  # thumbnails of the images
        assert "<polyline" in dom  # the sparkline
        assert "part-bad.jpg" in dom and 'class="anomaly"' in dom  # error row, anomaly row
        shot = screenshot(url, tmp_path / "status-page.png", tmp_path / "profile")
    finally:
        agent.stop()
    img = cv2.imread(str(shot))
    assert img is not None and img.shape[:2] == (1300, 1100)
    assert float(img.std()) > 10  # a drawn page, not a blank one
    if os.environ.get("CDML_STATUS_SCREENSHOT"):  # refresh docs/img/status-page.png
        Path(os.environ["CDML_STATUS_SCREENSHOT"]).write_bytes(shot.read_bytes())


def test_the_page_is_off_by_default_follows_reloads_and_needs_the_port(tmp_path: Path) -> None:
    cfg_path = _config(tmp_path, page=False)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        assert agent._server is not None
        code, _, _ = _get(agent._server.url + "/")
        assert code == 404 and agent.view is None
        assert _get(agent._server.url + "/healthz")[0] == 200
        cfg_path.write_text(cfg_path.read_text().replace("status_page: false", "status_page: true"))
        assert agent.reload()  # SIGHUP with the page turned on: served from now on
        assert _get(agent._server.url + "/")[0] == 200 and agent.view is not None
        cfg_path.write_text(cfg_path.read_text().replace("status_page: true", "status_page: false"))
        assert agent.reload()
        assert _get(agent._server.url + "/")[0] == 404 and agent.view is None
    finally:
        agent.stop()
    bad = tmp_path / "bad.yaml"
    bad.write_text("health: {status_page: true}\n")
    with pytest.raises(ConfigError, match="set metrics_port"):
        load_config(bad)


def _result(item: str, score: float, anomaly: bool = False) -> dict:
    return {
        "item": item,
        "label": "x",
        "score": score,
        "anomaly": anomaly,
        "anomaly_score": score,
        "latency_ms": 5.0,
        "ts": 0.0,
    }


def test_the_board_is_bounded() -> None:
    board = ActivityBoard("d")
    for i in range(200):
        board.observe("result", "cam", _result(f"{i}.jpg", i / 200, anomaly=i % 50 == 0))
        board.add_thumbnail("cam", f"{i}.jpg", b"j" * 100)
    board.add_thumbnail("cam", "huge.jpg", b"j" * 1_000_000)
    for i in range(100):
        board.observe(
            "error",
            "cam",
            {"source": "cam", "item": f"{i}", "error_type": "E", "message": "m", "ts": 0},
        )
    for i in range(100):
        board.observe("result", f"s{i}", _result("a", 0.1))
    snap = board.snapshot()
    cam = snap["sources"]["cam"]
    assert cam["items"] == 200 and cam["anomalies"] == 4
    assert [r["item"] for r in cam["last"]] == [f"{i}.jpg" for i in range(192, 200)]
    assert len(cam["last"]) == MAX_RESULTS and len(cam["scores"]) == MAX_SCORES
    assert len(board.sources["cam"].thumbs) == MAX_THUMBS
    assert board.thumbnail("cam", "huge.jpg") is None
    assert len(snap["errors"]) == 20 and snap["errors"][-1]["item"] == "99"
    assert len(snap["sources"]) == 64 and snap["ignored"] == 100 - 63


def test_images_are_held_not_decoded_and_made_thumbnails_when_asked() -> None:
    board = ActivityBoard("d")
    w = Window(
        "w",
        "cam",
        0.0,
        [Item("cam", f"{i}.jpg", "image", 0.0, part_photo(100, i), str(i)) for i in range(12)],
    )
    board.keep_images(w)
    src = board.sources["cam"]
    assert list(src.images) == [f"{i}.jpg" for i in range(4, 12)] and not src.thumbs
    assert src.images["11.jpg"] is w.items[11].data  # a reference, not a copy
    thumb = board.thumbnail("cam", "11.jpg")
    assert thumb is not None and list(src.thumbs) == ["11.jpg"] and "11.jpg" not in src.images
    assert board.thumbnail("cam", "11.jpg") is thumb  # cached
    assert board.thumbnail("cam", "0.jpg") is None  # not among the last 8
    big = Window(
        "b",
        "cam",
        0.0,
        [
            Item("cam", f"big{i}.jpg", "image", 0.0, b"x" * (3 * 1024 * 1024), f"b{i}")
            for i in range(4)
        ],
    )
    board.keep_images(big)
    assert sum(len(v) for v in src.images.values()) <= MAX_IMAGE_BYTES
    assert len(src.images) + len(src.thumbs) <= MAX_THUMBS


def test_leaves_open_the_tees_the_status_page_adds() -> None:
    a, b = JsonlOutput("-"), JsonlOutput("-")
    assert leaves(ObservedOutput(TeeOutput([a, b]), ActivityBoard())) == [a, b]


def test_the_page_escapes_what_payloads_say() -> None:
    board = ActivityBoard("d<b>")
    board.observe("result", "cam", _result("<script>alert(1)</script>.jpg", 0.5))
    board.observe(
        "error",
        "cam",
        {
            "source": "cam",
            "item": "<img src=x onerror=y>",
            "error_type": "E",
            "message": "</table>",
            "ts": 0,
        },
    )
    page = render_page(board.snapshot(), {"status": "ok"}, board.thumbnail)
    assert "<script>" not in page and "<img src=x" not in page and "&lt;/table&gt;" in page
    assert "d&lt;b&gt;" in page


def test_thumbnails_are_small_jpegs_and_a_non_image_has_none() -> None:
    thumb = thumbnail(part_photo(200, 1, size=1024))
    assert thumb is not None and len(thumb) < 8 * 1024
    img = cv2.imdecode(np.frombuffer(thumb, np.uint8), cv2.IMREAD_COLOR)
    assert max(img.shape[:2]) == THUMB_SIDE
    assert thumbnail(b"not an image") is None


def test_sparkline_spans_the_scores() -> None:
    svg = sparkline([0.0, 1.0, 0.5], width=100, height=20)
    assert 'points="0.0,17.0 50.0,3.0 100.0,10.0"' in svg
