"""A folder whose disk a test can fill and free again.

``real``: a small tmpfs mounted for the test and filled with a filler file, so every write
in it fails with ENOSPC exactly as on a full SD card (needs the right to mount; the test is
skipped where mounting is refused, and the ``injected`` variant still runs). ``injected``:
the module under test gets an ``open`` whose files raise ENOSPC on write while the disk is
"full" (and ``inject_call`` makes other functions fail the same way).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def enospc(what: str = "") -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), what)


class _FaultyFile:
    """A real file object whose writes raise ENOSPC while ``disk.full``."""

    def __init__(self, fh: Any, disk: FullDisk) -> None:
        self._fh, self._disk = fh, disk
        self._unflushed = False

    def write(self, data: bytes) -> int:
        if self._disk.full:
            raise enospc(self._fh.name)
        self._unflushed = True
        return int(self._fh.write(data))

    def flush(self) -> None:
        if self._disk.full and self._unflushed:
            raise enospc(self._fh.name)
        self._fh.flush()
        self._unflushed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _FaultyFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


class FullDisk:
    """``path`` is the folder; :meth:`fill` makes writes there fail, :meth:`free` ends it."""

    def __init__(self, kind: str, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kind = kind
        self.path = path
        self.full = False
        self._mp = monkeypatch

    def fill(self) -> None:
        self.full = True
        if self.kind == "real":
            fill(self.path)

    def free(self) -> None:
        self.full = False
        if self.kind == "real":
            (self.path / "filler").unlink(missing_ok=True)

    def inject_open(self, module: Any) -> None:
        """``module``'s ``open`` (injected variant only) returns files that fail when full."""
        if self.kind != "injected":
            return
        real_open = open

        def faulty_open(file: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
            fh = real_open(file, mode, *args, **kw)
            return _FaultyFile(fh, self) if any(c in mode for c in "wax+") else fh

        self._mp.setattr(module, "open", faulty_open, raising=False)

    def inject_call(self, module: Any, name: str) -> None:
        """``module.name`` raises ENOSPC while full (injected variant only)."""
        if self.kind != "injected":
            return
        real: Callable[..., Any] = getattr(module, name)

        def faulty(*args: Any, **kw: Any) -> Any:
            if self.full:
                raise enospc(str(args[0]) if args else name)
            return real(*args, **kw)

        self._mp.setattr(module, name, faulty)


def fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to the last block (``folder/filler``, to ENOSPC)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for step in (65536, 512):  # large writes, then the blocks they left
            try:
                while True:
                    os.write(fd, b"\0" * step)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str, why_skip: str = "") -> Iterator[Path]:
    """``path`` (made if missing) mounted as a tmpfs of ``size`` for the block, then unmounted.

    The test is skipped where mounting is refused (``why_skip`` added to the reason).
    """
    path.mkdir(exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"no tmpfs mount here ({proc.stderr.decode().strip()}){why_skip}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(name="full_disk", params=["real", "injected"])
def full_disk_fixture(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FullDisk]:
    path = tmp_path / "disk"
    if request.param == "injected":
        path.mkdir()
        yield FullDisk(request.param, path, monkeypatch)
        return
    with small_tmpfs(path, "256k", "; the injected variant covers it"):
        yield FullDisk(request.param, path, monkeypatch)
