"""The status page's thumbnails cost little, whatever image a camera writes.

A 130 KB PNG of 6000x6000 pixels is within the pipeline's limits: it is decoded for the model
in a decoder process of its own (a deadline, its memory not the agent's). The page made its
thumbnail in the agent itself, in the health endpoint's one thread: over 100 MiB and a
full decode per page view, ``/healthz`` waiting meanwhile; a PNG claiming 12000x12000, half a
gigabyte. The real ``cdml-edge run`` process, the file dropped into its watched folder, the
page fetched over HTTP; the agent's peak memory (``VmHWM``) read from ``/proc``.
"""

from __future__ import annotations

import signal
import struct
import subprocess
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from helpers.agent_runs import jpeg, start_agent, wait_for, write_atomic
from helpers.models import brightness_classifier
from helpers.ports import free_port

from cdml_edge.health.thumbs import thumbnail

MIB = 1024 * 1024


def png_bomb(width: int, height: int) -> bytes:
    """A valid black RGB PNG of ``width`` x ``height``: a few hundred KB, gigabytes decoded."""
    row = b"\x00" * (1 + width * 3)
    comp = zlib.compressobj(9)
    data = b"".join(comp.compress(row) for _ in range(height)) + comp.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _scored(out: Path) -> bool:
    return out.exists() and '"item":"bomb.png"' in out.read_text()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_a_thumbnail_of_a_decompression_bomb_is_not_made() -> None:
    assert thumbnail(png_bomb(12_000, 12_000)) is None
    small = thumbnail(jpeg(90, size=640))
    assert small is not None and small.startswith(b"\xff\xd8")


def test_the_page_of_an_agent_given_a_bomb_costs_no_memory(tmp_path: Path) -> None:
    brightness_classifier(tmp_path / "b.onnx")
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    port = free_port()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        "device: {id: bomb}\n"
        "sources:\n  - {name: cam, path: in/cam, modality: image, stable_seconds: 0.1}\n"
        "models: {image: {path: b.onnx}}\n"
        f"state_dir: {tmp_path / 'state'}\n"
        f"output: {{jsonl: {tmp_path / 'out.jsonl'}}}\n"
        f"health: {{interval: 0.3s, watchdog: false, metrics_port: {port}, status_page: true}}\n"
    )
    log = tmp_path / "agent.log"
    proc: subprocess.Popen[bytes] = start_agent(cfg, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: "agent ready" in log.read_text(), timeout=60, what="agent ready")
        write_atomic(cam / "fine.jpg", jpeg(90))
        write_atomic(cam / "bomb.png", png_bomb(6_000, 6_000))
        wait_for(lambda: _scored(tmp_path / "out.jsonl"), timeout=60, what="bomb.png scored")
        before = _peak_rss(proc.pid)
        # the board learns of the result after the file has it: views until the page shows
        # it (the peak counts every view's thumbnails)
        wait_for(lambda: "bomb.png" in _get(url + "/status")[1], what="bomb.png on the page")
        code, page = _get(url + "/status")
        grown = _peak_rss(proc.pid) - before
        assert code == 200 and "bomb.png" in page
        assert grown < 64 * MIB, f"the page views took {grown / MIB:.0f} MiB more"
        assert _get(url + "/healthz")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
