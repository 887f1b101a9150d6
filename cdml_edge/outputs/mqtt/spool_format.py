"""The spool's files: the record and cursor formats and the recovery scan of a spool folder.

A spool folder holds ``{id:012d}.seg`` segment files and a ``cursor`` file. Each record is

    b"CDSP" | u32 body length | u32 CRC-32 of (length, body) | body
    body = u8 flags (qos | retain << 2) | u16 topic length | topic | payload

and the cursor (the first record not yet acknowledged) is

    u64 segment id | u64 byte offset | u64 records before the offset | u32 CRC-32 of those

A torn record (kill -9, power loss) or a corrupt one fails its CRC and is skipped: parsing
resynchronises on the next ``CDSP`` magic and never raises. A segment that cannot be used at
all (not a file, larger than the spool bound, unreadable) is set aside as ``*.seg.bad``.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"CDSP"
_HEADER = struct.Struct("<4sII")  # magic, body length, crc32
_BODY_HEAD = struct.Struct("<BH")  # flags, topic length
HEADER_SIZE = _HEADER.size
MAX_BODY = 64 * 1024 * 1024
SEGMENT_SUFFIX = ".seg"
_CURSOR = struct.Struct("<QQQ")  # segment id, offset, records before offset
CURSOR_SIZE = _CURSOR.size + 4
_SCAN_CHUNK = 1024 * 1024


def record_size(topic: str, payload: bytes) -> int:
    """Bytes one record of ``topic`` and ``payload`` takes in a segment."""
    return HEADER_SIZE + _BODY_HEAD.size + len(topic.encode()) + len(payload)


@dataclass(frozen=True)
class SpoolRecord:
    """One spooled message: topic relative to ``{prefix}/{device}``."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False

    def encode(self) -> bytes:
        """The record as written to a segment: header (magic, length, CRC) and body."""
        topic = self.topic.encode()
        body = (
            _BODY_HEAD.pack((self.qos & 3) | (int(self.retain) << 2), len(topic))
            + topic
            + self.payload
        )
        length = struct.pack("<I", len(body))
        crc = zlib.crc32(body, zlib.crc32(length))
        return _HEADER.pack(MAGIC, len(body), crc) + body

    @classmethod
    def decode(cls, body: bytes) -> SpoolRecord:
        """The record of a ``body`` (its header already checked and stripped)."""
        flags, tlen = _BODY_HEAD.unpack_from(body, 0)
        start = _BODY_HEAD.size
        topic = body[start : start + tlen].decode()
        return cls(topic, bytes(body[start + tlen :]), flags & 3, bool(flags & 4))


def parse_records(
    buf: bytes | memoryview, complete: bool = True
) -> Iterator[tuple[int, int, bytes | None]]:
    """Yield ``(offset, end, body)`` for every valid record in ``buf``.

    A record whose CRC fails yields ``body=None`` for the skipped span up to the next magic.
    With ``complete=False`` parsing stops (without yielding) at a record that runs past the
    end of ``buf`` — more bytes may come; with ``complete=True`` such a torn tail is yielded
    as a skipped span.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    view = memoryview(data)
    pos, n = 0, len(view)
    while pos < n:
        if n - pos < HEADER_SIZE:
            if complete:
                yield pos, n, None
            return
        magic, length, crc = _HEADER.unpack_from(view, pos)
        end = pos + HEADER_SIZE + length
        if magic == MAGIC and length <= MAX_BODY and end <= n:
            body = view[pos + HEADER_SIZE : end]
            if zlib.crc32(body, zlib.crc32(struct.pack("<I", length))) == crc:
                yield pos, end, bytes(body)
                pos = end
                continue
        elif magic == MAGIC and length <= MAX_BODY and not complete:
            return  # a record still being read
        nxt = data.find(MAGIC, pos + 1)  # searched in place: recovery stays linear
        if nxt >= 0:
            skip_to = nxt
        elif complete:
            skip_to = n
        else:
            skip_to = max(pos + 1, n - len(MAGIC) + 1)  # keep a magic cut by the chunk end
        yield pos, skip_to, None
        pos = skip_to


def scan_segment(path: Path) -> int:
    """Count the valid records of a segment file, reading it in bounded chunks."""
    count = skipped = 0
    size = path.stat().st_size
    with open(path, "rb") as fh:
        buf, offset = b"", 0  # buf holds file bytes from ``offset`` on
        while True:
            want = _SCAN_CHUNK
            if len(buf) >= HEADER_SIZE:
                magic, length, _crc = _HEADER.unpack_from(buf, 0)
                if magic == MAGIC and length <= MAX_BODY:
                    want = max(want, HEADER_SIZE + length - len(buf))
            more = fh.read(want)
            buf += more
            complete = not more or offset + len(buf) >= size
            consumed = 0
            for off, end, body in parse_records(buf, complete=complete):
                consumed = end
                if body is None:  # counted in corrupt_skipped when the reader passes it
                    if not skipped:
                        log.warning(
                            "%s: a torn or corrupt record at byte %d is skipped", path, offset + off
                        )
                    skipped += 1
                else:
                    count += 1
            if complete:
                if skipped > 1:
                    log.warning("%s: %d torn or corrupt spans in all", path, skipped)
                return count
            buf, offset = buf[consumed:], offset + consumed


@dataclass(order=True)
class Position:
    """A place in the spool: segment id, byte offset, records before it in that segment."""

    seg: int
    offset: int
    index: int = 0


def encode_cursor(pos: Position) -> bytes:
    """The ``cursor`` file's bytes for ``pos``."""
    raw = _CURSOR.pack(pos.seg, pos.offset, pos.index)
    return raw + struct.pack("<I", zlib.crc32(raw))


def decode_cursor(raw: bytes) -> Position | None:
    """The position in a ``cursor`` file's bytes; ``None`` when they are corrupt."""
    if len(raw) != CURSOR_SIZE or zlib.crc32(raw[:-4]) != struct.unpack("<I", raw[-4:])[0]:
        return None
    seg, off, idx = _CURSOR.unpack(raw[:-4])
    return Position(seg, off, idx)


@dataclass
class Segment:
    """One segment file; ``sealed`` once no more records are appended to it."""

    id: int
    path: Path
    size: int = 0
    count: int = 0
    sealed: bool = True


def segment_path(folder: Path, seg_id: int) -> Path:
    """The file of segment ``seg_id`` in ``folder``: ``{id:012d}.seg``."""
    return folder / f"{seg_id:012d}{SEGMENT_SUFFIX}"


@dataclass
class Recovered:
    """What a spool folder holds after a restart (see :func:`recover_folder`)."""

    segments: list[Segment] = field(default_factory=list)
    cursor: Position = field(default_factory=lambda: Position(0, 0, 0))
    next_id: int = 1
    set_aside: int = 0

    @property
    def total(self) -> int:
        """Bytes of the segments kept."""
        return sum(s.size for s in self.segments)


def recover_folder(folder: Path, max_bytes: int, cursor: Position) -> Recovered:
    """Scan the segments of ``folder`` against the persisted ``cursor``.

    Segments wholly before the cursor were acknowledged and are deleted; unusable ones are
    set aside; the cursor is clamped to the first segment left (or moved to its start when
    its own segment is gone). New records go to segment ``next_id``, never to a recovered
    one, so a torn tail is never appended to.
    """
    out = Recovered()
    max_id = 0
    for path in sorted(folder.glob("*" + SEGMENT_SUFFIX)):
        try:
            seg_id = int(path.stem)
        except ValueError:
            continue
        max_id = max(max_id, seg_id)
        if seg_id < cursor.seg and path.is_file():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        seg = Segment(seg_id, path)
        try:
            if not path.is_file():
                raise OSError("not a regular file")
            seg.size = path.stat().st_size
            if seg.size > max_bytes:
                raise OSError(f"{seg.size} bytes exceed spool.max_bytes={max_bytes}")
            seg.count = scan_segment(path)
        except OSError as exc:
            set_aside(path, str(exc))
            out.set_aside += 1
            continue
        out.segments.append(seg)
    if out.segments and out.segments[0].id == cursor.seg:
        first = out.segments[0]
        cursor = Position(
            cursor.seg, min(cursor.offset, first.size), min(cursor.index, first.count)
        )
    elif out.segments:
        cursor = Position(out.segments[0].id, 0, 0)
    out.cursor = cursor
    out.next_id = max(max_id + 1, cursor.seg, 1)
    return out


def set_aside(path: Path, why: str) -> None:
    """Rename an unusable segment to ``*.seg.bad`` (kept for inspection)."""
    try:
        path.rename(path.with_name(path.name + ".bad"))
        log.error("%s: unusable spool segment set aside as *.bad: %s", path, why)
    except OSError as exc:
        log.error("%s: unusable spool segment skipped (%s; rename failed: %s)", path, why, exc)
