"""Links, devices and FIFOs in the C walk (a review): each case as the Python walk has it.

Nonzero sizes on links, high bytes and NULs in names and targets, 100-byte targets, ustar
prefixes and GNU magic, names seen twice (in the C part and across to the Python walk's
part: the skipped entries are compared in their order), a link last without an end
marker, a long name after a link, 'M' and base-256 headers, a link at a 1-MiB boundary;
frames of 512 and 4,096 bytes. All held.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import tar_cases
from helpers.plain_copies import same_both_ways, same_open_both_ways


def _incompressible(stream: bytes) -> bytes:
    """``stream`` with random bytes after it: zstd cannot shrink the whole by a quarter."""
    return stream + random.Random(0).randbytes(4 * len(stream))


END = b"\x00" * 1024
P = tar_cases.USTAR_MAGIC
CASES = {
    "link_nonzero_size": tar_cases.header(b"l", 700, b"2", link=b"t")
    + tar_cases.entry(b"a", b"x" * 10)
    + END,
    "link_high_bytes": tar_cases.header(b"h\xff", 0, b"1", link=b"t\xfe\x00zz") + END,
    "link_100": tar_cases.header(b"l", 0, b"2", link=b"T" * 100) + END,
    "link_prefix": tar_cases.header(b"l", 0, b"2", link=b"t", fields={345: b"pre"}) + END,
    "gnu_magic_345": tar_cases.header(b"l", 0, b"3", magic=b"ustar  \x00", fields={345: b"junk"})
    + END,
    "dup_link_member": tar_cases.entry(b"a", b"1")
    + tar_cases.header(b"a", 0, b"2", link=b"x")
    + tar_cases.header(b"b", 0, b"6")
    + tar_cases.header(b"a", 0, b"1", link=b"y")
    + END,
    "dup_across_rest": tar_cases.header(b"a", 0, b"2", link=b"x")
    + tar_cases.header(b"b", 0, b"6")
    + tar_cases.header(b"z", 0, b"V")
    + tar_cases.header(b"a", 0, b"2", link=b"y")
    + END,
    "link_last_no_end": tar_cases.entry(b"a", b"1") + tar_cases.header(b"l", 0, b"2", link=b"t"),
    "link_then_longname": tar_cases.header(b"l", 0, b"2", link=b"t")
    + tar_cases.entry(b"././@LongLink", b"long" * 40 + b"\x00", b"L")
    + tar_cases.entry(b"x", b"d")
    + END,
    "kind_M": tar_cases.header(b"m", 600, b"M")
    + tar_cases.pad(b"m" * 600)
    + tar_cases.header(b"l", 0, b"3")
    + END,
    "device_base256": tar_cases.header(
        b"d", 0, b"3", fields={124: b"\x80" + b"\x00" * 10 + b"\x05"}
    )
    + tar_cases.header(b"e", 0, b"4")
    + END,
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("frame", [512, 4096])
def test_link_cases_same_both_ways(name: str, frame: int, tmp_path: Path) -> None:
    path = tmp_path / "a.tar.zst"
    path.write_bytes(tar_cases.seekable_tar_zst(_incompressible(CASES[name]), frame=frame))
    found = same_both_ways(path, tmp_path)
    assert found[0] != "compressible"
    same_open_both_ways(path)


@pytest.mark.parametrize("frame", [1 << 20, 4096])
def test_link_at_one_mib_boundary_same_both_ways(frame: int, tmp_path: Path) -> None:
    first = tar_cases.entry(b"big", random.Random(1).randbytes((1 << 20) - 1024))
    stream = (
        first + tar_cases.header(b"l", 0, b"2", link=b"t") + tar_cases.header(b"f", 0, b"6") + END
    )
    path = tmp_path / "a.tar.zst"
    path.write_bytes(tar_cases.seekable_tar_zst(_incompressible(stream), frame=frame))
    found = same_both_ways(path, tmp_path)
    assert found[0] != "compressible"
    same_open_both_ways(path)
