#!/usr/bin/env python3
"""Generate the demo inputs: digit frames, motor audio clips and vibration CSV (seeded).

Writes, below ``--out`` (default ``demo/``, emptied first):

* ``camera.avi`` — a few seconds of camera frames (handwritten digits), played by the
  ``camera`` source at its fps;
* ``stage/cam/*.jpg`` — digit JPEGs that ``demo_run.py`` drops into the watched folder
  while the agent runs, plus one truncated JPEG (a bad input that ends in quarantine);
* ``stage/mic/*.wav`` — 1 s motor clips, a few with a bearing fault, plus one ``.wav``
  that is not audio;
* ``stage/vib/*.csv`` — 3-axis accelerometer windows, a few with a fault, plus one
  malformed CSV;
* ``truth.json`` — the label of every staged file (and of every video frame, by its
  position), to score what a subscriber received.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import cv2
import numpy as np

from cdml_edge import synth


def jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(".jpg", rgb[:, :, ::-1], [int(cv2.IMWRITE_JPEG_QUALITY), quality])
    if not ok:
        raise SystemExit("JPEG encoding failed")
    return buf.tobytes()


def make(out: Path, seconds: float, fps: int, images: int, clips: int, windows: int) -> dict:
    if out.exists():
        shutil.rmtree(out)
    stage = out / "stage"
    for sub in ("cam", "mic", "vib"):
        (stage / sub).mkdir(parents=True)
    truth: dict[str, dict[str, str]] = {"cam": {}, "mic": {}, "vib": {}, "cam-live": {}}

    frames, frame_labels = synth.digit_images(int(seconds * fps), seed=11, size=64)
    vw = cv2.VideoWriter(str(out / "camera.avi"), cv2.VideoWriter.fourcc(*"MJPG"), fps, (64, 64))
    if not vw.isOpened():
        raise SystemExit("OpenCV cannot write an MJPG video here")
    for n, (f, lab) in enumerate(zip(frames, frame_labels, strict=True)):
        vw.write(np.ascontiguousarray(f[:, :, ::-1]))
        truth["cam-live"][f"#{n}"] = str(int(lab))  # frames are named by capture time: by order
    vw.release()

    imgs, labels = synth.digit_images(images, seed=7, size=64)
    for n, (img, lab) in enumerate(zip(imgs, labels, strict=True)):
        name = f"part-{n:04d}.jpg"
        (stage / "cam" / name).write_bytes(jpeg(img))
        truth["cam"][name] = str(int(lab))
    whole = jpeg(imgs[0])
    (stage / "cam" / "part-broken.jpg").write_bytes(whole[: len(whole) // 2])
    truth["cam"]["part-broken.jpg"] = "quarantine"

    faults = max(1, clips // 4)
    for n, clip in enumerate(synth.machine_audio(clips - faults, seed=3)):
        (stage / "mic" / f"clip-{n:03d}.wav").write_bytes(clip)
        truth["mic"][f"clip-{n:03d}.wav"] = "normal"
    for n, clip in enumerate(synth.machine_audio(faults, seed=3, fault=True)):
        (stage / "mic" / f"clip-fault-{n:03d}.wav").write_bytes(clip)
        truth["mic"][f"clip-fault-{n:03d}.wav"] = "anomaly"
    (stage / "mic" / "clip-bogus.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEthis is not audio")
    truth["mic"]["clip-bogus.wav"] = "quarantine"

    faults = max(1, windows // 4)
    for n, data in enumerate(synth.vibration_csv(windows - faults, seed=5)):
        (stage / "vib" / f"vib-{n:03d}.csv").write_bytes(data)
        truth["vib"][f"vib-{n:03d}.csv"] = "normal"
    for n, data in enumerate(synth.vibration_csv(faults, seed=5, fault=True)):
        (stage / "vib" / f"vib-fault-{n:03d}.csv").write_bytes(data)
        truth["vib"][f"vib-fault-{n:03d}.csv"] = "anomaly"
    (stage / "vib" / "vib-garbled.csv").write_bytes(b"ax,ay,az\n0.1,0.2\n0.3,oops,0.5,0.6\n")
    truth["vib"]["vib-garbled.csv"] = "quarantine"

    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True))
    return {
        "camera_frames": len(frames),
        **{k: len(v) for k, v in truth.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("demo"))
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds of camera video")
    ap.add_argument("--fps", type=int, default=10)
    ap.add_argument("--images", type=int, default=40, help="digit JPEGs for the folder source")
    ap.add_argument("--clips", type=int, default=8, help="audio clips")
    ap.add_argument("--windows", type=int, default=8, help="vibration CSV files")
    args = ap.parse_args()
    summary = make(args.out, args.seconds, args.fps, args.images, args.clips, args.windows)
    print(f"demo data in {args.out}/: {summary}")


if __name__ == "__main__":
    main()
