"""Every generated peer case gives the same answer on the C core and the Python path.

Names, bytes, and for a refusal its error type and reason: compared whole, not only what
the per-class tests assert.
"""

from __future__ import annotations

import zipfile

import pytest
import zstandard
from helpers import tar_cases as tc
from helpers import zip_cases as zc

from cdml_edge.archive import ArchiveError, open_archive


def _cases() -> dict[str, bytes]:
    stream, _ = tc.member_stream()
    plain = zc.stdlib_zip({"a.txt": b"a\n"})
    cases = {
        "gnu-incremental": tc.gnu_incremental(),
        "old-gnu-sparse": tc.old_gnu_sparse(True),
        "old-gnu-sparse-bad-map": tc.old_gnu_sparse(False, stored_extra=10),
        "links": tc.links_and_devices(),
        "link-with-size": tc.entry(b"a.txt", b"a")
        + tc.header(b"link", 512, b"1", link=b"a.txt")
        + tc.entry(b"hidden.txt", b"x")
        + tc.END,
        "duplicates": tc.duplicate_names(),
        "dangling": tc.dangling_long_name(),
        "seek-extra": tc.seekable_tar_zst(stream, edit="extra"),
        "seek-empty": tc.seekable_tar_zst(stream, edit="empty"),
        "zstd-nothing": zstandard.ZstdCompressor().compress(b""),
        "zip-comment-past-end": zc.truncated_comment(),
        "zip-cut-signature": zc.cut_end_signature(),
        "zip64-count": zc.with_zip64_end(plain, count=2**64 - 1),
        "zip64-disagree": zc.with_zip64_end(plain, offset_shift=1),
        "zip-count": zc.count_mismatch(),
        "zip-dd-bad": zc.descriptor_crc_altered(),
        "zip-dd-bad-nosig": zc.descriptor_crc_altered(signature=False),
        "zip-lzma": zc.stdlib_zip({"l.txt": b"lzma " * 100}, method=zipfile.ZIP_LZMA),
        "zip64-in-name": zc.zip64_locator_in_name(),
        "zip-base0": zc.base0_offsets(),
        "zip-max32": zc.max_size_without_zip64(),
        "zip-local-name": zc.local_name_differs(),
        "zip-local-name-longer": zc.local_name_differs(same_length=False),
    }
    for form in ("0.0", "0.1", "1.0", "2.0"):
        cases[f"pax-sparse-{form}"] = tc.pax_sparse(form)
    for case in tc.BAD_PAX:
        cases[f"bad-pax-{case}"] = tc.bad_pax(case)
    return cases


def _outcome(data: bytes) -> object:
    try:
        arc = open_archive(data)
    except ArchiveError as exc:
        return ("open", type(exc).__name__, exc.reason)
    out: dict[str, object] = {"": (arc.names(), arc.duplicates(), arc.skipped())}
    for name in arc.names():
        try:
            out[name] = arc.read(name)
        except ArchiveError as exc:
            out[name] = (type(exc).__name__, exc.reason)
    try:
        out["*"] = arc.read_many(arc.names())
    except ArchiveError as exc:
        out["*"] = (type(exc).__name__, exc.reason, exc.member)
    return out


@pytest.mark.parametrize("case", sorted(_cases()))
def test_both_engines_answer_alike(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _cases()[case]
    monkeypatch.delenv("CDML_EDGE_NATIVE", raising=False)
    native = _outcome(data)
    monkeypatch.setenv("CDML_EDGE_NATIVE", "0")
    python = _outcome(data)
    assert native == python
