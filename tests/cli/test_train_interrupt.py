"""Ctrl-C during ``cdml-edge train``: a line saying what is kept, exit 130, nothing partial.

A real ``cdml-edge train`` process gets SIGINT once it has printed its first epoch line.
It must say so (which epoch it stopped in, where the finished epochs' checkpoints are),
exit 130 like any interrupted command, and leave only complete checkpoints: no temporary
file, and every checkpoint loadable.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("torch")

from cdml_edge.nn import checkpoint  # noqa: E402


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), value, dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def test_ctrl_c_says_what_is_kept_and_leaves_no_partial_file(tmp_path: Path) -> None:
    data = tmp_path / "shades.zip"
    with zipfile.ZipFile(data, "w") as z:
        for i in range(8):
            z.writestr(f"dark/{i}.png", _png(10 + i))
            z.writestr(f"light/{i}.png", _png(240 - i))
    out = tmp_path / "run"
    # Python keeps SIGINT ignored when it starts with it ignored (pytest run in the
    # background of a shell): the child takes Ctrl-C as a terminal's process does.
    code = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from cdml_edge.cli import app; app()"
    )
    args = ["--data", str(data), "--epochs", "100000", "--image-size", "16", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the first epoch line, then Ctrl-C
        seen.append(line)
        if line.startswith("epoch 1/"):
            break
    assert seen and seen[-1].startswith("epoch 1/"), "".join(seen)
    proc.send_signal(signal.SIGINT)
    stdout, rest = proc.communicate(timeout=240)
    stderr = "".join(seen) + rest
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    [line] = [x for x in stderr.splitlines() if x.startswith("cdml-edge train:")]
    assert "interrupted" in line and str(out / "checkpoints") in line
    assert stdout == ""
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept and all(name.endswith(".pt") and not name.startswith(".") for name in kept)
    for name in kept:
        checkpoint.load(out / "checkpoints" / name)
    assert any(name in line for name in kept)
