"""The README quick start, run exactly as written against a generated folder of classes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from _dataset_data import jpeg

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start() -> str:
    text = README.read_text()
    section = text.split("<!-- section:dataset -->", 1)[1].split("<!-- /section:dataset -->")[0]
    match = re.search(r"### Quick start\s+```python\n(.*?)```", section, re.S)
    assert match, "no quick start block in the README dataset section"
    return match.group(1)


def test_readme_quick_start_runs(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    for cls, colour in (("cat", (200, 60, 40)), ("dog", (40, 60, 200))):
        folder = tmp_path / "pets" / cls
        folder.mkdir(parents=True)
        for i in range(8):  # small: the block is run as written, the data need not be big
            img = np.clip(np.array(colour) + rng.normal(0, 20, (64, 72, 3)), 0, 255)
            (folder / f"{i:04d}.jpg").write_bytes(jpeg(img.astype(np.uint8)))
    script = tmp_path / "quick_start.py"
    script.write_text(quick_start())
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "16 ['cat', 'dog']"
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines[1:]]
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert (tmp_path / "pets.zip").is_file()
