"""A byte-bounded, crash-safe disk spool of MQTT messages: append-only segment files.

Layout: ``{dir}/{id:012d}.seg`` segment files and a ``cursor`` file. Each record is

    b"CDSP" | u32 body length | u32 CRC-32 of (length, body) | body
    body = u8 flags (qos | retain << 2) | u16 topic length | topic | payload

Records are read oldest first and acknowledged (:meth:`Spool.ack`) once the broker has them;
the cursor (the first record not yet acknowledged) is persisted by :meth:`Spool.commit`, and
fully acknowledged segments are deleted. After a crash everything after the persisted cursor
is sent again (at-least-once: duplicates carry the same result id).

A torn last record (kill -9, power loss) or a corrupt one fails its CRC and is skipped: the
reader resynchronises on the next ``CDSP`` magic and never raises. A new process always
appends to a fresh segment, so a torn tail is never appended to.

Full policy (the sum of segment sizes never exceeds ``max_bytes``): ``drop_oldest`` deletes
the oldest segment (at most ``segment_bytes``, an eighth of ``max_bytes``) and counts the
records in it that were never sent as ``dropped``; ``block`` makes :meth:`Spool.append`
wait until acknowledged segments free the room.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from cdml_edge.errors import CdmlError

log = logging.getLogger(__name__)

MAGIC = b"CDSP"
_HEADER = struct.Struct("<4sII")  # magic, body length, crc32
_BODY_HEAD = struct.Struct("<BH")  # flags, topic length
HEADER_SIZE = _HEADER.size
MAX_BODY = 64 * 1024 * 1024
_SUFFIX = ".seg"
_CURSOR = struct.Struct("<QQQ")  # segment id, offset, records before offset

FsyncPolicy = Literal["always", "batch", "never"]
FullPolicy = Literal["drop_oldest", "block"]


class SpoolError(CdmlError):
    """A spool that cannot be used; names the spool folder or file."""


class SpoolClosed(SpoolError):
    """The spool was closed while a caller waited for room."""


class RecordTooLarge(SpoolError):
    """A single record larger than the whole spool bound."""


@dataclass(frozen=True)
class SpoolRecord:
    """One spooled message: topic relative to ``{prefix}/{device}``."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False

    def encode(self) -> bytes:
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


_SCAN_CHUNK = 1024 * 1024


def _scan_segment(path: Path) -> int:
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
                        log.warning("%s: a torn or corrupt record at byte %d is skipped",
                                    path, offset + off)
                    skipped += 1
                else:
                    count += 1
            if complete:
                if skipped > 1:
                    log.warning("%s: %d torn or corrupt spans in all", path, skipped)
                return count
            buf, offset = buf[consumed:], offset + consumed


@dataclass
class _Segment:
    id: int
    path: Path
    size: int = 0
    count: int = 0
    sealed: bool = True


@dataclass(order=True)
class Position:
    """A place in the spool: segment id, byte offset, records before it in that segment."""

    seg: int
    offset: int
    index: int = 0


@dataclass
class SpoolToken:
    """Handed out with each record read; pass it back to :meth:`Spool.ack`."""

    end: Position
    acked: bool = field(default=False, compare=False)


class Spool:
    """Append-only segment spool; see the module docstring for format and guarantees."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_bytes: int,
        policy: FullPolicy = "drop_oldest",
        fsync: FsyncPolicy = "batch",
        segment_bytes: int | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.max_bytes = int(max_bytes)
        self.policy: FullPolicy = policy
        self.fsync: FsyncPolicy = fsync
        self.segment_bytes = segment_bytes or max(4096, min(8 * 1024**2, self.max_bytes // 8))
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"{self.dir}: cannot create spool folder: {exc}") from exc
        self._lock_fd = self._take_lock()
        self._lock = threading.Condition()
        self._segments: deque[_Segment] = deque()
        self._writer: BinaryIO | None = None
        self._reader: BinaryIO | None = None
        self._reader_seg: int = -1
        self._closed = False
        self._inflight: deque[SpoolToken] = deque()
        self._cursor_dirty = False
        self._total = 0
        self.dropped = 0
        self.corrupt_skipped = 0
        self.set_aside = 0
        self.bytes_written = 0
        self.appended = 0
        self.acked = 0
        self._recover()

    def _take_lock(self) -> int:
        """One process per spool folder (the kernel drops the lock when a process dies)."""
        path = self.dir / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise SpoolError(f"{self.dir}: spool folder is in use by another process") from exc
        return fd

    def _abandon(self) -> None:
        """Let go of files and lock without committing anything, as a crash would."""
        for fh in (self._writer, self._reader):
            if fh is not None:
                fh.close()
        self._writer = self._reader = None
        self._closed = True
        self._release_lock()

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, -1
        if fd >= 0:
            os.close(fd)

    # ---------------------------------------------------------------- recovery
    def _recover(self) -> None:
        cursor = self._load_cursor()
        max_id = 0
        for path in sorted(self.dir.glob("*" + _SUFFIX)):
            try:
                seg_id = int(path.stem)
            except ValueError:
                continue
            max_id = max(max_id, seg_id)
            if seg_id < cursor.seg and path.is_file():
                self._unlink(path)
                continue
            seg = _Segment(seg_id, path)
            try:
                if not path.is_file():
                    raise OSError("not a regular file")
                seg.size = path.stat().st_size
                if seg.size > self.max_bytes:
                    raise OSError(f"{seg.size} bytes exceed spool.max_bytes={self.max_bytes}")
                seg.count = _scan_segment(path)
            except OSError as exc:
                self._set_aside(path, str(exc))
                continue
            self._segments.append(seg)
            self._total += seg.size
        if self._segments and self._segments[0].id == cursor.seg:
            first = self._segments[0]
            cursor.index = min(cursor.index, first.count)
            cursor.offset = min(cursor.offset, first.size)
        elif self._segments:
            cursor = Position(self._segments[0].id, 0, 0)
        self._cursor = cursor
        self._read = Position(cursor.seg, cursor.offset, cursor.index)
        self._next_id = max(max_id + 1, cursor.seg, 1)
        with self._lock:
            self._release_consumed_locked()

    def _set_aside(self, path: Path, why: str) -> None:
        """Rename an unusable segment to ``*.seg.bad`` (kept for inspection) and count it."""
        self.set_aside += 1
        try:
            path.rename(path.with_name(path.name + ".bad"))
            log.error("%s: unusable spool segment set aside as *.bad: %s", path, why)
        except OSError as exc:
            log.error("%s: unusable spool segment skipped (%s; rename failed: %s)", path, why, exc)

    def _load_cursor(self) -> Position:
        path = self.dir / "cursor"
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return Position(0, 0, 0)
        except OSError as exc:
            raise SpoolError(f"{path}: cannot read spool cursor: {exc}") from exc
        if len(raw) != _CURSOR.size + 4 or zlib.crc32(raw[:-4]) != struct.unpack("<I", raw[-4:])[0]:
            log.warning("%s: corrupt cursor ignored; the whole spool will be sent again", path)
            return Position(0, 0, 0)
        seg, off, idx = _CURSOR.unpack(raw[:-4])
        return Position(seg, off, idx)

    # ---------------------------------------------------------------- stats
    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._total

    @property
    def pending(self) -> int:
        """Records not yet acknowledged (sent or not)."""
        with self._lock:
            return self._pending_locked()

    def _pending_locked(self) -> int:
        total = sum(s.count for s in self._segments if s.id >= self._cursor.seg)
        if self._segments and self._segments[0].id == self._cursor.seg:
            total -= self._cursor.index
        return max(total, 0)

    def unread(self) -> int:
        """Records not yet handed out by :meth:`read`."""
        with self._lock:
            total = sum(s.count for s in self._segments if s.id >= self._read.seg)
            if any(s.id == self._read.seg for s in self._segments):
                total -= self._read.index
            return max(total, 0)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "spool_bytes": self._total,
                "spool_records": self._pending_locked(),
                "spool_segments": len(self._segments),
                "spool_dropped": self.dropped,
                "spool_corrupt_skipped": self.corrupt_skipped,
                "spool_segments_set_aside": self.set_aside,
                "spool_bytes_written": self.bytes_written,
            }

    # ---------------------------------------------------------------- append
    def append(
        self, records: Sequence[SpoolRecord], wait: bool = True, timeout: float | None = None
    ) -> int:
        """Append records in order; returns how many were written (and synced per policy).

        With ``policy="block"`` a full spool makes this wait for room (``wait=True``) or
        return early with fewer written (``wait=False`` or ``timeout`` elapsed).
        """
        encoded = [r.encode() for r in records]
        written = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            try:
                for blob in encoded:
                    if self._closed:
                        raise SpoolClosed(f"{self.dir}: spool is closed")
                    if len(blob) > self.max_bytes:
                        raise RecordTooLarge(
                            f"{self.dir}: a record of {len(blob)} bytes exceeds "
                            f"spool.max_bytes={self.max_bytes}"
                        )
                    if not self._make_room(len(blob), wait, deadline):
                        break
                    self._write_locked(blob)
                    written += 1
                    if self.fsync == "always":
                        self._sync_locked()
            finally:
                if written:
                    if self.fsync == "batch":
                        self._sync_locked()
                    elif self._writer is not None:
                        self._writer.flush()
                    self.appended += written
                    self._lock.notify_all()
        return written

    def _make_room(self, need: int, wait: bool, deadline: float | None) -> bool:
        while self._total + need > self.max_bytes:
            if self.policy == "drop_oldest":
                self._drop_oldest_locked()
                continue
            if not wait:
                return False
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._lock.wait(remaining if remaining is not None else 1.0)
            if self._closed:
                raise SpoolClosed(f"{self.dir}: spool closed while waiting for room")
        return True

    def _write_locked(self, blob: bytes) -> None:
        seg = self._segments[-1] if self._segments else None
        if seg is None or seg.sealed or (seg.size and seg.size + len(blob) > self.segment_bytes):
            seg = self._new_segment_locked()
            self._release_consumed_locked()
        assert self._writer is not None
        self._writer.write(blob)
        seg.size += len(blob)
        self._total += len(blob)
        seg.count += 1
        self.bytes_written += len(blob)

    def _new_segment_locked(self) -> _Segment:
        if self._writer is not None:
            self._writer.flush()
            if self.fsync != "never":
                os.fsync(self._writer.fileno())
            self._writer.close()
        if self._segments:
            self._segments[-1].sealed = True
        seg_id = self._next_id
        self._next_id += 1
        path = self.dir / f"{seg_id:012d}{_SUFFIX}"
        try:
            self._writer = open(path, "ab")  # noqa: SIM115 - lives as long as the segment
        except OSError as exc:
            raise SpoolError(f"{path}: cannot create spool segment: {exc}") from exc
        if self.fsync != "never":
            self._sync_dir()
        seg = _Segment(seg_id, path, sealed=False)
        self._segments.append(seg)
        return seg

    def _sync_locked(self) -> None:
        if self._writer is None:
            return
        self._writer.flush()
        os.fsync(self._writer.fileno())

    def _sync_dir(self) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _drop_oldest_locked(self) -> None:
        if not self._segments:
            return
        seg = self._segments[0]
        if not seg.sealed:
            # Only the active segment is left: seal it so new records go to a fresh one.
            self._new_segment_locked()
        self._segments.popleft()
        if self._read.seg < seg.id:
            lost = seg.count
        elif self._read.seg == seg.id:
            lost = seg.count - self._read.index
        else:
            lost = 0
        self.dropped += max(lost, 0)
        if lost:
            log.warning("%s: spool full, dropped %d oldest records", self.dir, lost)
        self._forget_segment_locked(seg)

    def _forget_segment_locked(self, seg: _Segment) -> None:
        if self._reader_seg == seg.id and self._reader is not None:
            self._reader.close()
            self._reader, self._reader_seg = None, -1
        self._unlink(seg.path)
        self._total -= seg.size
        nxt = self._segments[0].id if self._segments else self._next_id
        if self._read.seg <= seg.id:
            self._read = Position(nxt, 0, 0)
        if self._cursor.seg <= seg.id:
            self._cursor = Position(nxt, 0, 0)
            self._cursor_dirty = True
        self._lock.notify_all()

    def _unlink(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    # ---------------------------------------------------------------- read / ack
    def read(self, max_records: int = 64) -> list[tuple[SpoolToken, SpoolRecord]]:
        """Up to ``max_records`` records not yet handed out, oldest first."""
        out: list[tuple[SpoolToken, SpoolRecord]] = []
        with self._lock:
            while len(out) < max_records and not self._closed:
                seg = self._segment_locked(self._read.seg)
                if seg is None:
                    later = [s for s in self._segments if s.id > self._read.seg]
                    if not later:
                        break
                    self._read = Position(later[0].id, 0, 0)
                    continue
                if self._read.offset >= seg.size:
                    if not seg.sealed:
                        break
                    self._read = Position(seg.id + 1, 0, 0)
                    continue
                self._read_segment_locked(seg, max_records - len(out), out)
        return out

    def _segment_locked(self, seg_id: int) -> _Segment | None:
        for seg in self._segments:
            if seg.id == seg_id:
                return seg
        return None

    def _read_segment_locked(
        self, seg: _Segment, limit: int, out: list[tuple[SpoolToken, SpoolRecord]]
    ) -> None:
        if self._reader_seg != seg.id or self._reader is None:
            if self._reader is not None:
                self._reader.close()
            self._reader = open(seg.path, "rb")  # noqa: SIM115 - cached between reads
            self._reader_seg = seg.id
        if self._writer is not None and not seg.sealed:
            self._writer.flush()
        chunk = max(1024 * 1024, HEADER_SIZE)
        start = self._read.offset
        self._reader.seek(start)
        data = self._reader.read(min(seg.size - start, chunk))
        complete = start + len(data) >= seg.size
        consumed = 0
        for _off, end, body in parse_records(data, complete=complete):
            if body is None:
                self.corrupt_skipped += 1
                consumed = end
                continue
            index = self._read.index + 1
            self._read = Position(seg.id, start + end, index)
            token = SpoolToken(Position(seg.id, start + end, index))
            self._inflight.append(token)
            out.append((token, SpoolRecord.decode(body)))
            consumed = end
            if len(out) >= limit:
                break
        if consumed == 0 and not complete:
            # A single record longer than the chunk: read it whole.
            self._reader.seek(start)
            data = self._reader.read(seg.size - start)
            for _off, end, body in parse_records(data):
                consumed = end
                if body is not None:
                    index = self._read.index + 1
                    token = SpoolToken(Position(seg.id, start + end, index))
                    self._inflight.append(token)
                    out.append((token, SpoolRecord.decode(body)))
                    self._read = Position(seg.id, start + end, index)
                else:
                    self.corrupt_skipped += 1
                break
        if self._read.offset < start + consumed:
            self._read = Position(seg.id, start + consumed, self._read.index)

    def ack(self, token: SpoolToken) -> None:
        """The record of ``token`` is safe at the broker; advance the cursor over done records."""
        with self._lock:
            token.acked = True
            self.acked += 1
            moved = False
            while self._inflight and self._inflight[0].acked:
                done = self._inflight.popleft()
                if done.end > self._cursor:
                    self._cursor = done.end
                    moved = True
            if moved:
                self._cursor_dirty = True
                self._release_consumed_locked()

    def rewind(self) -> None:
        """Forget records handed out but not acknowledged; :meth:`read` returns them again."""
        with self._lock:
            self._inflight.clear()
            self._read = Position(self._cursor.seg, self._cursor.offset, self._cursor.index)

    def _release_consumed_locked(self) -> None:
        while self._segments:
            seg = self._segments[0]
            fully_acked = self._cursor.seg > seg.id or (
                self._cursor.seg == seg.id and self._cursor.offset >= seg.size
            )
            if not (seg.sealed and fully_acked):
                return
            self._segments.popleft()
            self._forget_segment_locked(seg)

    def commit(self) -> None:
        """Persist the cursor (atomic replace); acknowledged records are not sent again."""
        with self._lock:
            if not self._cursor_dirty:
                return
            self._cursor_dirty = False
            cur = self._cursor
            raw = _CURSOR.pack(cur.seg, cur.offset, cur.index)
            raw += struct.pack("<I", zlib.crc32(raw))
            tmp = self.dir / "cursor.tmp"
            with open(tmp, "wb") as fh:
                fh.write(raw)
                if self.fsync == "always":
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, self.dir / "cursor")

    def close(self) -> None:
        """Commit the cursor and close files; waiting appenders get :class:`SpoolClosed`."""
        self.commit()
        with self._lock:
            self._closed = True
            if self._writer is not None:
                self._writer.flush()
                if self.fsync != "never":
                    os.fsync(self._writer.fileno())
                self._writer.close()
                self._writer = None
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self._lock.notify_all()
            self._release_lock()
