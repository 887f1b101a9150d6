"""A plain tar cut inside a member is refused at open, as its tar.zst and tarfile refuse it.

The header walk of a plain tar jumps over member data: a tar cut inside a member (an
interrupted download) once opened with the members before the cut and no error.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import zstandard

from cdml_edge.archive import TruncatedArchiveError, open_archive

pytestmark = pytest.mark.usefixtures("engine")


def _tar(count: int = 6, size: int = 700) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for k in range(count):
            info = tarfile.TarInfo(f"m/{k:02d}.bin")
            info.size = size
            tf.addfile(info, io.BytesIO(bytes([k]) * size))
    return buf.getvalue()


def _tarfile_names(data: bytes) -> list[str] | None:
    """The members tarfile lists, ``None`` when it refuses the stream."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            return [m.name for m in tf.getmembers()]
    except tarfile.TarError:
        return None


# (cut at, member named in the error or None where the stream is whole up to the cut)
RAW = _tar()
MEMBER = 512 + 1024  # a header and 700 bytes of data padded to 1024
CUTS = {
    "inside data": (3 * MEMBER + 512 + 300, "m/03.bin"),
    "inside data of the first": (512 + 1, "m/00.bin"),
    "after the data, inside its padding": (3 * MEMBER + 512 + 700, "m/03.bin"),
    "one byte short of the padding": (3 * MEMBER + MEMBER - 1, "m/03.bin"),
    "last member's data": (5 * MEMBER + 512 + 699, "m/05.bin"),
    "on a header boundary": (4 * MEMBER, None),
    "no end marker": (6 * MEMBER, None),
}


@pytest.mark.parametrize("case", sorted(CUTS))
def test_a_plain_tar_cut_inside_a_member_is_refused(tmp_path: Path, case: str) -> None:
    cut, member = CUTS[case]
    data = RAW[:cut]
    path = tmp_path / "cut.tar"
    path.write_bytes(data)
    zst = tmp_path / "cut.tar.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(data))
    names = _tarfile_names(data)
    for src in (str(path), data):
        if member is None:
            assert names is not None
            with open_archive(src) as arc:
                assert arc.names() == names
                assert arc.verify() == []
            continue
        assert names is None  # tarfile refuses it too
        with pytest.raises(TruncatedArchiveError, match="cut short") as info:
            open_archive(src)
        assert info.value.member == member
        assert "cut.tar" in str(info.value) or not isinstance(src, str)
    if member is None:
        with open_archive(str(zst)) as arc:
            assert arc.names() == names
    else:  # the same bytes compressed: refused too
        with pytest.raises(TruncatedArchiveError):
            open_archive(str(zst))


def test_a_skipped_entry_cut_short_is_refused(tmp_path: Path) -> None:
    """An entry the walk passes over (a volume label with data) must fit in the file too."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("a.txt")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
        label = tarfile.TarInfo("label")
        label.type = b"V"
        label.size = 2000
        tf.addfile(label, io.BytesIO(b"v" * 2000))
    data = buf.getvalue()[: 1024 + 512 + 1000]
    path = tmp_path / "label.tar"
    path.write_bytes(data)
    with pytest.raises(TruncatedArchiveError, match="cut short") as info_:
        open_archive(str(path))
    assert info_.value.member == "label"
