"""An index-cache write cut short by a crash (SIGKILL) is not left in the folder for ever.

The temporary file of an entry being written stays behind when its process is killed (the
OOM killer, a preempted job); it is no entry, so the bound never counted it. A later write
deletes such files once they are a day old, as the seekable-copy cache does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cdml_edge.archive.s3 import S3IndexCache
from cdml_edge.fsio import TMP_PREFIX

_WRITER = """
import sys
from cdml_edge.archive.s3 import S3IndexCache
chunk = bytes(range(256)) * (1 << 12)  # 1 MiB; 128 of them: long enough to be killed in
cache = S3IndexCache(sys.argv[1], 1 << 40)
cache.put("e|b|k", '"etag"', 1 << 40, [(i << 20, chunk) for i in range(128)])
"""


def _crashed_write(root: Path) -> Path:
    """The temporary file a writer killed in the middle of an entry leaves behind."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, os.fspath(root)])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            temps = list(root.glob(TMP_PREFIX + "*"))
            if temps:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return temps[0]
            if proc.poll() is not None:
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    raise AssertionError("the writer never started its entry")


def test_a_day_old_temporary_entry_is_deleted_by_the_next_write(tmp_path: Path) -> None:
    root = tmp_path / "s3-index"
    root.mkdir()
    left = _crashed_write(root)
    assert left.exists()
    cache = S3IndexCache(root, 1 << 20)
    cache.put("e|b|k2", '"x"', 10, [(0, b"0123456789")])
    assert left.exists()  # young: it may be another process's write under way
    day_ago = time.time() - 25 * 3600
    os.utime(left, (day_ago, day_ago))
    cache.put("e|b|k3", '"y"', 10, [(0, b"0123456789")])
    assert not left.exists()
    assert cache.get("e|b|k2") is not None and cache.get("e|b|k3") is not None
