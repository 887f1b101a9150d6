"""An archive rewritten in place: a reopen compares the file with the one opened.

A reopen (a spawned worker, a read after the source's ``close()``) finds the new ``mtime``
and raises ``ArchiveChangedError``. A process that holds a descriptor checks nothing per
read (no ``stat``): docs/archive.md says so.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import pytest

from cdml_edge.archive import ArchiveChangedError, open_archive


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_same_size_rewrite_in_place_is_refused_on_reopen(tmp_path: Path) -> None:
    v1 = _tar([("a.bin", b"A" * 1000), ("b.bin", b"B" * 1000)])
    v2 = _tar([("b.bin", b"b" * 1000), ("a.bin", b"a" * 1000)])
    assert len(v1) == len(v2)
    path = tmp_path / "x.tar"
    path.write_bytes(v1)
    arc = open_archive(path)
    assert arc.read("a.bin") == b"A" * 1000
    blob = pickle.dumps(arc)
    st = path.stat()
    with path.open("r+b") as f:
        f.write(v2)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(ArchiveChangedError):
        pickle.loads(blob).read("a.bin")
    arc.source.close()
    with pytest.raises(ArchiveChangedError):
        arc.read("a.bin")
    arc.close()
