#!/usr/bin/env python3
"""Camera benchmark: what the capture process costs, and how fast a camera comes back.

An MJPEG-over-HTTP camera (a server in a separate process: 640x480 JPEGs at 30 frames/s) is
read at 10 frames/s for ``--seconds`` by

* ``CameraSource`` (ours): OpenCV in a capture process, JPEGs handed over a pipe;
* the baseline, measured in the same run: the same OpenCV calls in a thread of this process
  (grab every frame, retrieve + JPEG-encode one per 1/fps), as a camera source without a
  capture process would do it.

Reported per mode: frames delivered, CPU per frame (this process plus the capture process,
user + system), latency from the grab to the frame reaching the sink (p50 / p99), and the
memory the capture process adds (its USS). Then the recovery figures of ``CameraSource``:
start to first frame (process start, OpenCV import, open), and a stall mid-stream
(``read_timeout`` 2 s) to the first frame of the new capture, and the CPU one failed
reconnect attempt costs (what a camera that stays away costs every ``reconnect_max``).
"""

from __future__ import annotations

import argparse
import http.server
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from timing import cpu_seconds, load_average, percentile, ratio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


# -- the camera (run in its own process: --serve PORT) ------------------------------------
def serve(port: int, fps: float) -> None:
    import cv2

    rng = np.random.default_rng(0)
    frames = []
    for n in range(30):
        noise = rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)
        img = cv2.GaussianBlur(noise, (0, 0), 3)  # camera-like: compresses like a real scene
        cv2.putText(img, str(n), (40, 200), cv2.FONT_HERSHEY_SIMPLEX, 4, (255, 255, 255), 8)
        data = cv2.imencode(".jpg", img)[1].tobytes()
        head = f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(data)}\r\n\r\n"
        frames.append(head.encode() + data + b"\r\n")
    stall = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/stall":  # the next stream stops sending (socket kept open)
                stall.set()
                self.send_response(204)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
            self.end_headers()
            n, next_t = 0, time.monotonic()
            try:
                while True:
                    if stall.is_set():
                        stall.clear()
                        time.sleep(3600)
                    self.wfile.write(frames[n % len(frames)])
                    n += 1
                    next_t += 1.0 / fps
                    time.sleep(max(0.0, next_t - time.monotonic()))
            except OSError:
                return

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    print("ready", flush=True)
    httpd.serve_forever()


def start_camera(fps: float) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--camera-fps", str(fps)],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc, f"http://127.0.0.1:{port}/video.mjpg"


# -- measuring ------------------------------------------------------------------------------
class Sink:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.first_at: float | None = None
        self.lock = threading.Lock()

    def take(self, ts: float) -> None:
        now = time.time()
        with self.lock:
            self.latencies.append(now - ts)
            if self.first_at is None:
                self.first_at = time.monotonic()

    def __call__(self, item: Any) -> None:
        self.take(item.ts)


def capture_children() -> list[psutil.Process]:
    return [
        c
        for c in psutil.Process().children()
        if "cdml_edge.intake.camera.worker" in " ".join(c.cmdline())
    ]


def run_ours(url: str, fps: float, seconds: float) -> dict[str, Any]:
    from cdml_edge.intake.budget import ByteBudget
    from cdml_edge.intake.camera.source import CameraSource, CameraSpec

    sink = Sink()
    spec = CameraSpec("bench", url, fps=fps, read_timeout_s=2.0, reconnect_first_s=0.2)
    cam = CameraSource(spec, ByteBudget(10**10), sink, lambda *a: None)
    t0 = time.monotonic()
    cam.start()
    while sink.first_at is None and time.monotonic() - t0 < 60:
        time.sleep(0.01)
    first_frame_s = (sink.first_at or t0) - t0
    time.sleep(1.0)  # past the start-up
    me, (child,) = psutil.Process(), capture_children()
    with sink.lock:
        sink.latencies.clear()
    c0 = cpu_seconds([me, child])
    time.sleep(seconds)
    c1 = cpu_seconds([me, child])
    with sink.lock:
        lat = list(sink.latencies)
    uss = child.memory_full_info().uss
    cam.stop()
    return {"frames": len(lat), "cpu": c1 - c0, "lat": lat, "first": first_frame_s, "uss": uss}


def run_baseline(url: str, fps: float, seconds: float) -> dict[str, Any]:
    import cv2

    sink = Sink()
    stop = threading.Event()
    params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, 10000, cv2.CAP_PROP_READ_TIMEOUT_MSEC, 2000]
    t0 = time.monotonic()

    def loop() -> None:
        cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG, params)
        period, next_t = 1.0 / fps, time.monotonic()
        while not stop.is_set() and cap.grab():
            ts = time.time()
            now = time.monotonic()
            if now >= next_t:
                ok, frame = cap.retrieve()
                data = cv2.imencode(".jpg", frame, [int(cv2.IMWRITE_JPEG_QUALITY), 90])[1]
                bytes(data.tobytes())
                sink.take(ts)
                next_t = max(next_t + period, now)
        cap.release()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    while sink.first_at is None and time.monotonic() - t0 < 60:
        time.sleep(0.01)
    first_frame_s = (sink.first_at or t0) - t0
    time.sleep(1.0)
    me = psutil.Process()
    with sink.lock:
        sink.latencies.clear()
    c0 = cpu_seconds([me])
    time.sleep(seconds)
    c1 = cpu_seconds([me])
    with sink.lock:
        lat = list(sink.latencies)
    stop.set()
    thread.join(timeout=5)
    return {"frames": len(lat), "cpu": c1 - c0, "lat": lat, "first": first_frame_s, "uss": 0}


def stall_recovery(url: str, fps: float) -> float:
    """Seconds from a stall mid-stream to the first frame of the new capture."""
    import urllib.request

    from cdml_edge.intake.budget import ByteBudget
    from cdml_edge.intake.camera.source import CameraSource, CameraSpec

    sink = Sink()
    spec = CameraSpec("bench", url, fps=fps, read_timeout_s=2.0, reconnect_first_s=0.2)
    cam = CameraSource(spec, ByteBudget(10**10), sink, lambda *a: None)
    cam.start()
    while sink.first_at is None:
        time.sleep(0.01)
    time.sleep(0.5)
    urllib.request.urlopen(url.replace("/video.mjpg", "/stall"), timeout=5).read()
    stalled_at = time.time()
    while cam.health().state == "streaming" and time.time() - stalled_at < 30:
        time.sleep(0.01)
    while cam.health().state != "streaming" and time.time() - stalled_at < 60:
        time.sleep(0.01)
    cam.stop()
    return time.time() - stalled_at


def failed_attempt_cpu(n: int = 5) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one failed reconnect attempt.

    The attempt: a capture process that starts, imports OpenCV and cannot open its camera.
    """
    import os

    from cdml_edge.intake.camera.link import EXITED, CaptureProcess
    from cdml_edge.intake.camera.settings import CaptureSettings

    t0, w0 = os.times(), time.monotonic()
    for _ in range(n):
        proc = CaptureProcess(CaptureSettings(url="/nonexistent/camera"))
        while (msg := proc.next_message(30.0)) is not None and msg.kind != EXITED:
            pass
        proc.close()
    t1 = os.times()
    cpu = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
    return cpu / n, (time.monotonic() - w0) / n


def _pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile in milliseconds."""
    return percentile(values, q) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--fps", type=float, default=10.0)
    ap.add_argument("--camera-fps", type=float, default=30.0)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the stall's state change is expected
    if args.serve:
        serve(args.serve, args.camera_fps)
        return
    server, url = start_camera(args.camera_fps)
    try:
        base = run_baseline(url, args.fps, args.seconds)
        ours = run_ours(url, args.fps, args.seconds)
        stall = stall_recovery(url, args.fps)
        attempt_cpu, attempt_wall = failed_attempt_cpu()
    finally:
        server.kill()
    print(
        f"camera: 640x480 MJPEG over HTTP at {args.camera_fps:g} fps, taken at {args.fps:g} fps,"
        f" {args.seconds:g} s per mode; load average {load_average():.1f}"
    )
    print(
        f"{'mode':28} {'frames':>6} {'CPU ms/frame':>12} {'p50 ms':>7} {'p99 ms':>7}"
        f" {'first frame s':>13} {'extra USS MiB':>13}"
    )
    for name, r in (("in-thread (baseline)", base), ("capture process (ours)", ours)):
        per = r["cpu"] / max(1, r["frames"]) * 1000
        print(
            f"{name:28} {r['frames']:6d} {per:12.2f} {_pct(r['lat'], 50):7.2f}"
            f" {_pct(r['lat'], 99):7.2f} {r['first']:13.2f} {r['uss'] / 2**20:13.1f}"
        )
    ours_cpu, base_cpu = (r["cpu"] / max(1, r["frames"]) for r in (ours, base))
    print(
        f"CPU per frame, ours / baseline: {ratio(ours_cpu, base_cpu)};"
        f" p50 latency ours - baseline: {_pct(ours['lat'], 50) - _pct(base['lat'], 50):+.2f} ms"
    )
    print(f"stall mid-stream (read_timeout 2 s) -> frames again: {stall:.2f} s")
    print(
        f"one failed reconnect attempt (process start, OpenCV import, open fails):"
        f" {attempt_cpu * 1000:.0f} ms CPU, {attempt_wall:.2f} s"
    )


if __name__ == "__main__":
    main()
