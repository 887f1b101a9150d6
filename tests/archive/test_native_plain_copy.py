"""The C core's plain copy of a stock tar.zst gives what the Python path gives, byte for byte.

Each case writes the copy twice, through ``cz_tar_plain_copy`` and through the Python walk,
and compares the copy's bytes, the member index and the entries skipped, or the error
(type and message). Archives written by GNU tar (gnu, pax, ustar formats: long names,
prefixes, links, sparse files, non-UTF-8 names, times past 2242 in base-256), by hand
(every header the C walk leaves to Python), several zstd frames with a skippable one, and
hundreds of mutated archives (bit flips, cuts, inserted bytes).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import zstandard
from helpers import tar_cases
from helpers.plain_copies import Served, same_both_ways, same_open_both_ways

from cdml_edge.archive.native import plain_copier
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar import native_copy, reframe

pytestmark = pytest.mark.skipif(plain_copier() is None, reason="the C core with zstd is not built")

PROBE = reframe.PLAIN_PROBE_BYTES


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Served:
    return Served(monkeypatch)


def _gnu_tar(tmp: Path, root: Path, fmt: str, name: str = "stock.tar.zst") -> Path:
    out = tmp / name
    sparse = [] if fmt == "ustar" else ["-S"]  # ustar has no sparse files
    subprocess.run(
        ["tar", "--zstd", f"--format={fmt}", *sparse, "-cf", str(out), "-C", str(root), "."],
        check=True,
    )
    return out


def _odd_tree(root: Path) -> None:
    """Files GNU tar writes every kind of header for."""
    rnd = random.Random(3)
    for i in range(40):
        p = root / ("a", "b/c")[i % 2] / f"{i:03d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rnd.randbytes(rnd.randrange(0, 30_000)))
    deep = root / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / "prefixed.bin").write_bytes(rnd.randbytes(5000))  # a ustar prefix
    (root / ("long-" + "n" * 150 + ".bin")).write_bytes(rnd.randbytes(700))  # a long name
    (root / "big.bin").write_bytes(rnd.randbytes(3 << 20))  # over the C core's 1-MiB steps
    (root / "empty.bin").write_bytes(b"")
    os.symlink("a/000.bin", root / "sym")
    os.link(root / "a" / "000.bin", root / "hard")
    os.mkfifo(root / "fifo")
    raw = os.fsencode(str(root)) + b"/caf\xe9.bin"  # not UTF-8
    with open(raw, "wb") as fh:
        fh.write(rnd.randbytes(900))
    with open(root / "holes.bin", "wb") as fh:  # sparse: -S stores its map
        fh.seek(1 << 20)
        fh.write(rnd.randbytes(4096))
    future = root / "future.bin"
    future.write_bytes(rnd.randbytes(600))
    os.utime(future, (2**34, 2**34))  # past 8**11 seconds: a base-256 mtime


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
@pytest.mark.parametrize("fmt", ["gnu", "pax", "posix", "ustar"])
def test_gnu_tar_archives(tmp_path: Path, fmt: str, served: Served) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    _odd_tree(root)
    if fmt == "ustar":  # no long names, non-UTF-8 names, base-256 times or holes
        for p in root.iterdir():
            if p.name.startswith("long-") or p.name in ("future.bin", "holes.bin"):
                p.unlink()
        os.unlink(os.fsencode(str(root)) + b"/caf\xe9.bin")
    stock = _gnu_tar(tmp_path, root, fmt)
    found = same_both_ways(stock, tmp_path)
    assert found[0] == "copy" and len(found[1][0]) >= 40
    assert served.copies == 1  # the C core copied
    if fmt == "ustar":  # every header is one the C walk takes (links and FIFOs skipped)
        assert served.walked == len(found[1][0]) and served.skipped == len(found[4])
    elif fmt == "gnu":  # up to the first long name or sparse file
        assert 0 < served.walked < len(found[1][0])
    else:  # GNU tar's pax format gives every entry a pax record: Python walks them all
        assert served.walked == 0
    same_open_both_ways(stock)  # the pass at open


def test_the_c_core_walks_a_plain_archive_alone(tmp_path: Path, served: Served) -> None:
    stream, members = tar_cases.member_stream(30)
    path = tmp_path / "plain.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=1).compress(_incompressible(stream)))
    found = same_both_ways(path, tmp_path)
    assert served.walked == 30 == len(found[1][0])
    src = FileSource(path)
    walked = native_copy.walked_members(src, src.size())  # the open's pass
    assert walked is not None and len(walked[0]) == 30 and not walked[1]
    assert same_open_both_ways(path)[0] == "open"


@pytest.mark.parametrize("form", ["ustar", "gnu"])
def test_links_devices_and_fifos_are_skipped_by_the_c_walk(
    tmp_path: Path, form: str, served: Served
) -> None:
    """Symbolic links, devices and FIFOs: skipped as the Python walk skips them.

    Named with a ustar prefix or not, a link target of 100 bytes (no NUL), a name seen
    twice (the later entry's reason, the earlier one's place), then a file after them. A
    hard link is a member, served as its target (tests/archive/test_tar_hard_links.py).
    """
    magic = tar_cases.USTAR_MAGIC if form == "ustar" else tar_cases.GNU_MAGIC
    prefix = {345: b"deep/er"} if form == "ustar" else {}
    stream = (
        tar_cases.entry(b"data/a.txt", b"alpha\n", magic=magic)
        + tar_cases.header(b"data/link", 0, b"2", link=b"t" * 100, magic=magic, fields=prefix)
        + tar_cases.header(b"data/hard", 0, b"1", link=b"data/a.txt", magic=magic)
        + tar_cases.header(b"dev/null", 0, b"3", magic=magic)
        + tar_cases.header(b"dev/sda", 0, b"4", magic=magic)
        + tar_cases.header(b"dev/fifo", 0, b"6", magic=magic)
        + tar_cases.header(b"data/hard", 0, b"6", magic=magic)  # the same name again
        + tar_cases.header(b"caf\xe9", 0, b"2", link=b"\xff\xfe", magic=magic)
        + tar_cases.entry(b"data/b.txt", b"bee\n" * 300, magic=magic)
        + tar_cases.END
    )
    path = tmp_path / "links.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(_incompressible(stream)))
    found = same_both_ways(path, tmp_path)
    assert found[0] == "copy" and len(found[4]) == 6
    assert served.walked == 3 and served.skipped == 6  # data/a.txt, data/hard, data/b.txt
    opened = same_open_both_ways(path)
    assert opened[0] == "open" and len(opened[1].skipped) == 6
    src = FileSource(path)
    walked = native_copy.walked_members(src, src.size())  # the open's pass, by the C walk
    assert walked is not None and len(walked[0]) == 3 and list(walked[1].items()) == found[4]


@pytest.mark.parametrize("ending", ["end marker", "no end marker", "cut header", "past the end"])
def test_the_open_pass_is_the_c_cores_only_to_a_clean_end(tmp_path: Path, ending: str) -> None:
    """The members pass at open: the C core's walk when it reached a clean end, else Python's.

    Python's walk at open raises for a member cut short (``ExactReader.skip``) and a cut
    header; an end marker or a stream ending on a header boundary end it cleanly.
    """
    stream, _ = tar_cases.member_stream(5)
    body = {
        "end marker": stream,
        "no end marker": stream[: -len(tar_cases.END)],
        "cut header": stream[: -len(tar_cases.END)] + tar_cases.header(b"x", 9)[:300],
        "past the end": stream[: -len(tar_cases.END)] + tar_cases.header(b"x", 9000),
    }[ending]
    path = tmp_path / "e.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(body))
    src = FileSource(path)
    walked = native_copy.walked_members(src, src.size())
    found = same_open_both_ways(path)
    if ending in ("end marker", "no end marker"):
        assert walked is not None and len(walked[0]) == 5 and found[0] == "open"
    else:
        assert walked is None and found[0] == "error"


def _incompressible(stream: bytes) -> bytes:
    """``stream`` with random bytes after it, so that zstd cannot shrink the whole by 1/4."""
    return stream + random.Random(0).randbytes(4 * len(stream))


HAND_MADE = {
    "links and devices": tar_cases.links_and_devices(),
    "duplicate names": tar_cases.duplicate_names(),
    "gnu incremental": tar_cases.gnu_incremental(),
    "dangling long name": tar_cases.dangling_long_name(),
    "bad pax": tar_cases.bad_pax("no newline"),
    "old gnu sparse": tar_cases.old_gnu_sparse(True),
    "pax sparse 1.0": tar_cases.pax_sparse("1.0"),
    "no end marker": tar_cases.entry(b"a.txt", b"a" * 700),
    "cut in a member": tar_cases.entry(b"a.txt", b"a" * 700)[:900],
    "cut in a header": tar_cases.entry(b"a.txt", b"a" * 700) + b"\x01" * 100,
    "bad checksum": tar_cases.entry(b"a.txt", b"a")[:148] + b"0000000\x00" + bytes(356),
    "base-256 size": tar_cases.header(b"b.bin", 0, fields={124: b"\x80" + bytes(10) + b"\x05"})
    + bytes(512),
    "size with a sign": tar_cases.header(b"c.bin", 0, fields={124: b"+0000000005\x00"})
    + tar_cases.pad(b"12345"),
    "spaces around octal": tar_cases.header(b"d.bin", 0, fields={124: b"  5 \x00      "})
    + tar_cases.pad(b"12345")
    + tar_cases.END,
    "empty": b"",
    "folder with a size": tar_cases.header(b"dir/", 3000, b"5") + tar_cases.END,
}


@pytest.mark.parametrize("case", sorted(HAND_MADE))
def test_hand_made_headers(tmp_path: Path, case: str) -> None:
    path = tmp_path / "case.tar.zst"
    stream = HAND_MADE[case]
    # the same stream, after members the C core walks, in a stream too random to shrink
    lead, _ = tar_cases.member_stream(3)
    lead = lead[: -len(tar_cases.END)]
    body = lead + stream + random.Random(1).randbytes(4096)
    path.write_bytes(zstandard.ZstdCompressor().compress(body))
    same_both_ways(path, tmp_path)
    same_open_both_ways(path)
    path.write_bytes(zstandard.ZstdCompressor().compress(stream))  # alone
    same_both_ways(path, tmp_path)
    same_open_both_ways(path)


def test_frames_skippable_frames_and_cuts(tmp_path: Path, served: Served) -> None:
    stream, _ = tar_cases.member_stream(20)
    stream = _incompressible(stream)
    frames, _ = tar_cases.zstd_frames(stream, 1000)  # frames cut inside headers and data
    skip = b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"hello"
    path = tmp_path / "frames.tar.zst"
    path.write_bytes(skip + frames[:5000] + frames[5000:] + skip)
    found = same_both_ways(path, tmp_path)
    assert found[0] == "copy" and served.walked == 20
    assert same_open_both_ways(path)[0] == "open"
    for cut in (1, 17, len(frames) // 2, len(frames) - 3):  # cut inside a frame
        path.write_bytes(frames[:cut])
        assert same_both_ways(path, tmp_path)[0] == "error"
        same_open_both_ways(path)  # an error, or none where the cut lies past the end marker
    path.write_bytes(frames + b"\x00garbage")
    assert same_both_ways(path, tmp_path)[0] == "error"
    same_open_both_ways(path)  # the walk stops at the end marker: Python reads no further


def test_a_stream_that_shrinks_well_gets_no_plain_copy(tmp_path: Path) -> None:
    stream = b"".join(
        tar_cases.entry(b"t/%04d.csv" % k, b"%d,%d\n" % (k, k) * 5000) for k in range(150)
    )
    path = tmp_path / "text.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(stream + tar_cases.END))
    assert len(stream) > PROBE  # judged after the probe, before the end
    assert same_both_ways(path, tmp_path) == ("compressible",)


def test_a_device_is_left_to_the_python_path(tmp_path: Path) -> None:
    """Only an empty regular file is written by the C core (it reads the copy back)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    stream, _ = tar_cases.member_stream(10)
    path = tmp_path / "s.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(_incompressible(stream)))
    src = FileSource(path)
    with open("/dev/full", "r+b") as out:
        assert not native_copy.serves(src, src.size(), out)
        with pytest.raises(OSError, match="No space"):
            reframe.write_plain_copy(src, src.size(), out)


@pytest.mark.parametrize("mode", ["wb", "ab+", "rb+"])
def test_an_output_it_cannot_write_from_empty_goes_to_python(
    tmp_path: Path, mode: str, served: Served
) -> None:
    """Write-only, appending, or holding bytes already: the Python path writes it."""
    stream, _ = tar_cases.member_stream(4)
    path = tmp_path / "s.tar.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(_incompressible(stream)))
    src = FileSource(path)
    (tmp_path / "o.tar").write_bytes(b"old" if mode == "rb+" else b"")
    with open(tmp_path / "o.tar", mode) as out:
        out.seek(0)
        assert not native_copy.serves(src, src.size(), out)
        assert reframe.write_plain_copy(src, src.size(), out) is not False
    assert served.copies == 0


def test_mutated_archives_give_the_same_outcome(tmp_path: Path) -> None:
    """Bit flips, cuts and inserted bytes: the C core and Python agree on every one."""
    rnd = random.Random(7)
    stream, _ = tar_cases.member_stream(6)
    seeds = [
        zstandard.ZstdCompressor(level=1).compress(_incompressible(stream)),
        zstandard.ZstdCompressor(level=1).compress(stream),  # its headers too
        tar_cases.zstd_frames(stream, 700)[0],
    ]
    path = tmp_path / "m.tar.zst"
    kinds, opens = set(), set()
    for _ in range(300):
        data = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 3)):
            op, at = rnd.random(), rnd.randrange(len(data))
            if op < 0.5:
                data[at] ^= 1 << rnd.randrange(8)
            elif op < 0.7:
                del data[at:]
            else:
                data[at:at] = rnd.randbytes(rnd.randint(1, 20))
        path.write_bytes(bytes(data))
        kinds.add(same_both_ways(path, tmp_path)[0])
        opens.add(same_open_both_ways(path)[0])
    assert kinds == {"copy", "compressible", "error"}
    assert opens == {"open", "error"}
