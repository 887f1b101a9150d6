"""Longer fuzz run of the archive readers (``make fuzz``): mutated archives in subprocesses.

Workers mutate valid ZIP / tar.zst / tar archives (bit flips, truncation, splices, header
fields set to extreme values) and open + read them on the C core and the Python path, from
bytes, from a file and from a source the C core cannot reach itself (as S3). The tar.zst
seeds include one written through pyzstd (frames cut inside members, no member index) and
one of the earlier layout (no seek-table entry for the index). Each input is also written as
the plain copy a stock tar.zst gets (the C core's decompression and header walk).
Anything other than an ``ArchiveError`` is a finding; so is a crash (signal) or a hang
(no progress for ``--hang`` seconds). The input being parsed is kept in a file so a
crashing one is saved to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

SIGS = (
    b"PK\x01\x02",
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"PK\x06\x06",
    b"PK\x06\x07",
    b"\x28\xb5\x2f\xfd",
    b"\x5e\x2a\x4d\x18",
    b"\x5d\x2a\x4d\x18",
    b"ustar",
)


def seeds() -> dict[str, bytes]:
    from cdml_edge.archive import pack

    rng = random.Random(1)
    items = [
        ("a.txt", b"alpha " * 60),
        ("dir/b.bin", rng.randbytes(400)),
        ("c.json", b'{"k": [1, 2, 3]}' * 20),
        ("d.jpg", rng.randbytes(300)),
        ("e", b""),
        ("ü/long-" + "n" * 120, b"long name"),
    ]
    out = {"zip": pack(items, mtime=1e9), "tar.zst": pack(items, "tar.zst", frame_bytes=300)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    out["tar"] = buf.getvalue()
    import zstandard

    out["tar.zst-plain"] = zstandard.ZstdCompressor().compress(out["tar"])  # stock: one frame
    out["tar.zst-pyzstd"] = _pyzstd_seekable(out["tar"])
    out["tar.zst-v1"] = _without_index_entry(out["tar.zst"])
    z64 = bytearray(out["zip"])  # the same ZIP with a ZIP64 end record
    out["zip64"] = _with_zip64(bytes(z64))
    out["zip-zstd"] = _zstd_zip(b"zstd member " * 40)
    out["tar-sparse"] = _sparse_tar()
    return out


def _sparse_tar() -> bytes:
    """A pax 0.1 sparse member, an old GNU one with an extension block, then a file."""

    def head(name: bytes, size: int, kind: bytes, fields: dict[int, bytes]) -> bytes:
        b = bytearray(512)
        b[0 : len(name)] = name
        b[124:136] = b"%011o\x00" % size
        b[156:157] = kind
        b[257:265] = b"ustar  \x00" if kind == b"S" else b"ustar\x0000"
        for at, value in fields.items():
            b[at : at + len(value)] = value
        b[148:156] = b" " * 8
        b[148:156] = b"%06o\x00 " % sum(b)
        return bytes(b)

    def pad(data: bytes) -> bytes:
        return data + bytes(-len(data) % 512)

    runs = [(k * 4096, bytes([65 + k]) * 100) for k in range(6)]
    cells = b"".join(b"%011o\x00%011o\x00" % (o, len(d)) for o, d in runs)
    stored = b"".join(d for _, d in runs)
    pax = b"".join(
        b"%d %s=%s\n" % (len(k) + len(v) + 5, k, v)  # lengths of two digits
        for k, v in ((b"GNU.sparse.map", b"0,100,8192,50"), (b"GNU.sparse.size", b"9000"))
    )
    out = head(b"PaxHeaders/p", len(pax), b"x", {}) + pad(pax)
    out += head(b"GNUSparseFile.1/p.bin", 150, b"0", {}) + pad(bytes(range(150)))
    out += head(
        b"s.bin", len(stored), b"S", {386: cells[:96], 482: b"\x01", 483: b"%011o\x00" % 30000}
    )
    out += pad(cells[96:]) + pad(stored)
    return out + head(b"after.txt", 3, b"0", {}) + pad(b"ok\n") + bytes(1024)


def _pyzstd_seekable(plain: bytes) -> bytes:
    """``plain`` written through pyzstd's SeekableZstdFile in 500-byte frames."""
    import pyzstd

    buf = io.BytesIO()
    with pyzstd.SeekableZstdFile(buf, "w", max_frame_content_size=500) as f:
        f.write(plain)
    return buf.getvalue()


def _without_index_entry(data: bytes) -> bytes:
    """A tar.zst of ours with the seek table the earlier writer made (index not listed)."""
    from cdml_edge.archive.tar.seekable import seek_table_frame

    (count,) = struct.unpack_from("<L", data, len(data) - 9)
    start = len(data) - 17 - 8 * count
    rows = [struct.unpack_from("<LL", data, start + 8 + 8 * k) for k in range(count - 1)]
    return data[:start] + seek_table_frame(rows)


def _zstd_zip(data: bytes) -> bytes:
    """A one-member ZIP whose member is zstd-compressed (method 93)."""
    import zlib

    import zstandard

    body = zstandard.ZstdCompressor().compress(data)
    crc = zlib.crc32(data)
    head = struct.pack(
        "<4s2B4HL2L2H", b"PK\x03\x04", 63, 0, 0, 93, 0, 0x5021, crc, len(body), len(data), 1, 0
    )
    cd = struct.pack(
        "<4s4B4HL2L5H2L",
        b"PK\x01\x02",
        63,
        3,
        63,
        0,
        0,
        93,
        0,
        0x5021,
        crc,
        len(body),
        len(data),
        1,
        0,
        0,
        0,
        0,
        0,
        0,
    )
    local = head + b"z" + body
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(cd) + 1, len(local), 0)
    return local + cd + b"z" + end


def _with_zip64(data: bytes) -> bytes:
    eocd = data.rindex(b"PK\x05\x06")
    _, _, _, n, _, cd_size, cd_off, _ = struct.unpack_from("<4s4H2LH", data, eocd)
    rec = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, cd_size, cd_off)
    loc = struct.pack("<4sLQL", b"PK\x06\x07", 0, eocd, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return data[:eocd] + rec + loc + end


def mutate(rng: random.Random, data: bytes, hits: list[int]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        if not buf:
            break
        op = rng.random()
        if op < 0.35:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op < 0.45:
            del buf[rng.randrange(len(buf)) :]
        elif op < 0.55:
            a = rng.randrange(len(buf) + 1)
            buf[a:a] = rng.randbytes(rng.randint(1, 40))
        elif op < 0.62:
            a = rng.randrange(len(buf))
            del buf[a : a + rng.randint(1, 40)]
        else:
            base = rng.choice(hits) if hits else 0
            pos = min(len(buf) - 1, base + rng.randrange(64))
            value = rng.choice(
                [
                    0,
                    1,
                    0x7F,
                    0xFF,
                    0xFFFF,
                    0xFFFFFFFF,
                    0x7FFFFFFF,
                    1 << 20,
                    rng.getrandbits(32),
                    (1 << 64) - 1,
                ]
            )
            width = rng.choice([1, 2, 4, 8])
            buf[pos : pos + width] = struct.pack("<Q", value & ((1 << 64) - 1))[:width]
    return bytes(buf)


class Fetched:
    """A source the C core cannot read itself: the reader fetches ranges first (as S3)."""

    def __init__(self, data: bytes) -> None:
        from cdml_edge.archive.source import MemorySource

        mem = MemorySource(data, "<fetched>")
        self.name = mem.name
        self.size, self.pread, self.pread_many = mem.size, mem.pread, mem.pread_many

    def fileno(self) -> None:
        return None

    def close(self) -> None:
        pass


def exercise(data: bytes | str | Fetched) -> None:
    """Open ``data`` and read everything: one by one, as a batch, as a batch with repeats.

    ``data``: bytes, a file path (the C core's descriptor path) or a fetched source.
    """
    from cdml_edge.archive import ArchiveError, open_archive

    try:
        arc = open_archive(data, max_member_bytes=1 << 22)
    except ArchiveError:
        return
    names = arc.names()
    for n in names:
        try:
            arc.info(n)
            arc.read(n)
        except ArchiveError:
            pass
    with contextlib.suppress(ArchiveError):
        arc.read_many(names)
    with contextlib.suppress(ArchiveError):
        arc.read_many(names[::-1] + names[:2])
    arc.verify()
    arc.close()


def plain_copy(path: str) -> None:
    """Write the plain copy a stock tar.zst gets (the C core's copy and header walk)."""
    import zstandard

    from cdml_edge.archive import ArchiveError
    from cdml_edge.archive.source import FileSource
    from cdml_edge.archive.tar.reframe import write_plain_copy

    src = FileSource(path)
    try:
        with (
            tempfile.TemporaryFile() as out,
            contextlib.suppress(ArchiveError, EOFError, zstandard.ZstdError),
        ):
            write_plain_copy(src, src.size(), out)
    finally:
        src.close()


def worker(seed: int, seconds: float, current: str, progress: str) -> int:
    rng = random.Random(seed)
    base = seeds()
    kinds = sorted(base)
    hits = {
        k: [i for s in SIGS for i in range(len(v)) if v.startswith(s, i)] for k, v in base.items()
    }
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        kind = rng.choice(kinds)
        data = mutate(rng, base[kind], hits[kind])
        with open(current, "wb") as f:
            f.write(data)
        try:
            exercise(data)
            exercise(current)
            exercise(Fetched(data))
            plain_copy(current)
        except Exception:  # noqa: BLE001 - an untyped error is a finding
            traceback.print_exc()
            return 3
        n += 1
        if n % 200 == 0:
            with open(progress, "w") as f:
                f.write(str(n))
    with open(progress, "w") as f:
        f.write(str(n))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hang", type=float, default=30.0, help="seconds without progress = hang")
    ap.add_argument("--out", default="fuzz-findings")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        s, secs, cur, prog = args.worker
        return worker(int(s), float(secs), cur, prog)
    tmp = tempfile.mkdtemp(prefix="cdml-fuzz-")
    procs = []
    for k in range(args.workers):
        env = dict(os.environ, CDML_EDGE_NATIVE="1" if k % 2 == 0 else "0")
        cur, prog = os.path.join(tmp, f"cur{k}"), os.path.join(tmp, f"prog{k}")
        p = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(1000 + k), str(args.seconds), cur, prog],
            env=env,
        )
        procs.append((k, env["CDML_EDGE_NATIVE"], p, cur, prog))
    status = 0
    last: dict[int, tuple[str, float]] = {}
    while procs:
        time.sleep(1.0)
        for item in list(procs):
            k, nat, p, cur, prog = item
            rc = p.poll()
            mark = Path(prog).read_text() if os.path.exists(prog) else ""
            seen = last.get(k)
            if seen is None or seen[0] != mark:
                last[k] = (mark, time.monotonic())
            if rc is None and time.monotonic() - last[k][1] > args.hang:
                p.kill()
                rc = -9
                print(f"worker {k} (native={nat}): no progress for {args.hang:.0f} s: hang")
            if rc is None:
                continue
            procs.remove(item)
            print(f"worker {k} (native={nat}): {mark or 0} inputs, exit {rc}")
            if rc != 0:
                status = 1
                os.makedirs(args.out, exist_ok=True)
                dest = os.path.join(args.out, f"finding-{k}-{int(time.time())}.bin")
                shutil.copy(cur, dest)
                print(f"  input kept in {dest}")
    shutil.rmtree(tmp, ignore_errors=True)
    print("fuzz: OK" if status == 0 else "fuzz: FINDINGS")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
