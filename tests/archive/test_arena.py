"""Batch reads into a reused arena, on the C core and the pure-Python path, for every format."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import pytest
from helpers.archives import CountingSource, raw_zip, write_tar

from cdml_edge.archive import Arena, CorruptArchiveError, open_archive, write_archive
from cdml_edge.archive.source import MemorySource

pytestmark = pytest.mark.usefixtures("engine")


def _items(n: int = 60, seed: int = 3) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.choice([0, 1, 7, 100, 5_000, 30_000])
        data = bytes(rng.randrange(256) for _ in range(size // 3)) + b"x" * (size - size // 3)
        out.append((f"d/{i:03d}.bin", data))
    return out


@pytest.mark.parametrize("suffix", [".zip", ".tar.zst", ".tar"])
def test_arena_batches_equal_fresh_reads(tmp_path: Path, suffix: str) -> None:
    items = _items()
    path = tmp_path / f"a{suffix}"
    if suffix == ".tar":
        with open(path, "wb") as fh:
            write_tar(fh, items)
    else:
        write_archive(path, items)
    want = dict(items)
    arena = Arena()
    with open_archive(path) as arc:
        names = [n for n, _ in items]
        for batch in (names[:16], names[16:48], random.Random(1).sample(names, 30)):
            views = arc.read_many(batch, arena=arena)
            assert all(type(v) is memoryview and v.readonly for v in views)
            assert [bytes(v) for v in views] == [want[n] for n in batch]
            assert [bytes(v) for v in views] == arc.read_many(batch)
        assert type(arc.read(names[5])) is bytes
        assert arc.read_many([], arena=arena) == []
    assert arena.batches == 3 and arena.oversized == 0


def test_arena_is_reused_not_regrown(tmp_path: Path) -> None:
    items = [(f"m/{i}.bin", bytes([i]) * 20_000) for i in range(64)]
    path = tmp_path / "a.zip"
    write_archive(path, items)
    arena = Arena()
    with open_archive(path) as arc:
        names = [n for n, _ in items]
        first = arc.read_many(names[:32], arena=arena)
        cap = arena.capacity
        buf = first[0].obj
        second = arc.read_many(names[32:], arena=arena)
        assert arena.capacity == cap and second[0].obj is buf  # the same pages again
        assert bytes(second[3]) == bytes([35]) * 20_000
        # views of the previous batch now show the new batch's bytes: that is the contract
        assert bytes(first[3]) == bytes(second[3])


def test_arena_bound_reads_larger_batches_fresh(tmp_path: Path) -> None:
    items = [(f"m/{i}.bin", bytes([i]) * 50_000) for i in range(10)]
    path = tmp_path / "a.zip"
    write_archive(path, items)
    arena = Arena(max_bytes=120_000)
    with open_archive(path) as arc:
        names = [n for n, _ in items]
        small = arc.read_many(names[:2], arena=arena)
        assert [bytes(v) for v in small] == [d for _, d in items[:2]]
        big = arc.read_many(names, arena=arena)
        assert [bytes(v) for v in big] == [d for _, d in items]
    assert arena.capacity <= 120_000
    assert (arena.batches, arena.oversized) == (1, 1)


def test_arena_checks_crc_and_names_the_member() -> None:
    data = raw_zip(
        [(b"ok.txt", b"fine" * 100, 8), (b"bad.txt", b"payload" * 100, 8)],
        crc_override=0x1234,
    )
    arc = open_archive(data)
    with pytest.raises(CorruptArchiveError) as err:
        arc.read_many(["bad.txt"], arena=Arena())
    assert err.value.member == "bad.txt" and "CRC" in str(err.value)


def test_arena_on_methods_the_c_core_leaves_to_python(tmp_path: Path) -> None:
    """bzip2 members are read by the Python path inside a native batch.

    They land in the arena all the same, next to the members the C core wrote there.
    """
    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.txt", b"alpha" * 999, compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("b.txt", b"bravo" * 999, compress_type=zipfile.ZIP_BZIP2)
        zf.writestr("c.txt", b"charlie" * 99, compress_type=zipfile.ZIP_STORED)
    with open_archive(path) as arc:
        views = arc.read_many(["a.txt", "b.txt", "c.txt"], arena=Arena())
    assert [bytes(v) for v in views] == [b"alpha" * 999, b"bravo" * 999, b"charlie" * 99]


def test_arena_from_a_remote_source(tmp_path: Path) -> None:
    """A source that is neither a file nor memory (as S3): one pread_many, then the arena."""
    items = _items(20)
    path = tmp_path / "a.zip"
    write_archive(path, items)
    src = CountingSource(MemorySource(path.read_bytes(), name="remote.zip"))
    from cdml_edge.archive.zip.archive import ZipArchive

    arc = ZipArchive.open(src)  # type: ignore[arg-type]
    src.calls.clear()
    names = [n for n, _ in items]
    views = arc.read_many(names, arena=Arena())
    assert [bytes(v) for v in views] == [d for _, d in items]
    assert [k for k, _ in src.calls] == ["pread_many"]


def test_arena_rejects_a_nonpositive_bound() -> None:
    with pytest.raises(ValueError):
        Arena(max_bytes=0)
