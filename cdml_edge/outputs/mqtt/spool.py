"""A byte-bounded, crash-safe disk spool of MQTT messages: append-only segment files.

The files and their formats are described in :mod:`~.spool_format`. Records are read oldest
first and acknowledged (:meth:`Spool.ack`) once the broker has them; the cursor (the first
record not yet acknowledged) is persisted by :meth:`Spool.commit`, and fully acknowledged
segments are deleted. After a crash everything after the persisted cursor is sent again
(at-least-once: duplicates carry the same result id); a new process always appends to a
fresh segment.

Full policy (the sum of segment sizes never exceeds ``max_bytes``): ``drop_oldest`` deletes
the oldest segment (at most ``segment_bytes``, an eighth of ``max_bytes``) and counts the
records in it that were never sent as ``dropped``; ``block`` makes :meth:`Spool.append`
wait until acknowledged segments free the room.

A full disk or an I/O error is a state, never an exception out of the spool: a failed
append is undone (the segment is cut back to its last synced record and sealed) and
returns how many records are safe, so the caller keeps the rest; a failed cursor write is
tried again at the next commit; a segment that cannot be read three times in a row is set
aside (its unsent records counted as dropped). :attr:`Spool.faults` (a
:class:`~cdml_edge.fsio.DiskFaults`) says whether the spool is degraded, reports the
episode once and paces the retries (``retry_s``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import PROBE_BYTES, TMP_PREFIX, DiskFaults, FaultHook, atomic_write, fsync_dir
from cdml_edge.outputs.mqtt.spool_format import (
    HEADER_SIZE,
    Position,
    Segment,
    SpoolRecord,
    decode_cursor,
    encode_cursor,
    parse_records,
    recover_folder,
    segment_path,
    set_aside,
)

log = logging.getLogger(__name__)

CURSOR_NAME = "cursor"
PROBE_NAME = TMP_PREFIX + "probe"  # a disk probe's file; swept at start like any temporary
READ_ATTEMPTS = 3  # a segment that fails to read this often in a row is set aside

FsyncPolicy = Literal["always", "batch", "never"]
FullPolicy = Literal["drop_oldest", "block"]


class SpoolError(CdmlError):
    """A spool that cannot be used; names the spool folder or file."""


class SpoolInUse(SpoolError):
    """Another process holds the spool folder."""


class SpoolClosed(SpoolError):
    """The spool was closed while a caller waited for room."""


class RecordTooLarge(SpoolError):
    """A single record larger than the whole spool bound."""


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
        *,
        on_event: FaultHook | None = None,
        retry_s: float = 1.0,
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
        self._segments: deque[Segment] = deque()
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
        self.faults = DiskFaults(
            "spool",
            self.dir,
            retry_s=retry_s,
            on_event=on_event,
            probe=self._probe_disk,
            probe_ops=("append",),
        )
        self._mark = (0, 0, 0)  # (segment, size, count) of the last synced record
        self._call_written = self._call_durable = 0  # records of the running append
        self._read_failures: dict[int, int] = {}
        self._recover()

    def _take_lock(self) -> int:
        """One process per spool folder (the kernel drops the lock when a process dies)."""
        path = self.dir / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise SpoolInUse(
                f"{self.dir}: spool folder is in use by another process (one agent per spool)"
            ) from exc
        return fd

    def _abandon(self) -> None:
        """Let go of files and lock without committing anything, as a crash would.

        Its disk probe stops as well: a crash ends it with the process.
        """
        self.faults.close()
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
        for stale in self.dir.glob(TMP_PREFIX + "*"):  # a cursor write cut short by a crash
            with contextlib.suppress(OSError):
                stale.unlink()
        found = recover_folder(self.dir, self.max_bytes, self._load_cursor())
        self._segments.extend(found.segments)
        self._total = found.total
        self.set_aside = found.set_aside
        self._cursor = found.cursor
        self._read = Position(found.cursor.seg, found.cursor.offset, found.cursor.index)
        self._next_id = found.next_id
        with self._lock:
            self._release_consumed_locked()

    def _load_cursor(self) -> Position:
        path = self.dir / CURSOR_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return Position(0, 0, 0)
        except OSError as exc:
            raise SpoolError(f"{path}: cannot read spool cursor: {exc}") from exc
        pos = decode_cursor(raw)
        if pos is None:
            log.warning("%s: corrupt cursor ignored; the whole spool will be sent again", path)
            return Position(0, 0, 0)
        return pos

    def head(self) -> Position:
        """Where the next record will be written: every record appended so far ends at or before."""
        with self._lock:
            if not self._segments:
                return Position(0, 0, 0)
            seg = self._segments[-1]
            return Position(seg.id, seg.size, seg.count)

    # ---------------------------------------------------------------- stats
    @property
    def size_bytes(self) -> int:
        """Bytes of the segment files on disk."""
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
        """The spool's counters for the health payload, ``spool_``-prefixed."""
        with self._lock:
            return {
                "spool_bytes": self._total,
                "spool_records": self._pending_locked(),
                "spool_segments": len(self._segments),
                "spool_dropped": self.dropped,
                "spool_corrupt_skipped": self.corrupt_skipped,
                "spool_segments_set_aside": self.set_aside,
                "spool_bytes_written": self.bytes_written,
                "spool_degraded": int(self.faults.degraded is not None),
                "spool_io_errors": self.faults.errors,
            }

    # ---------------------------------------------------------------- append
    def append(
        self, records: Sequence[SpoolRecord], wait: bool = True, timeout: float | None = None
    ) -> int:
        """Append records in order; returns how many were written (and synced per policy).

        With ``policy="block"`` a full spool makes this wait for room (``wait=True``) or
        return early with fewer written (``wait=False`` or ``timeout`` elapsed). On a disk
        error the records not yet synced are undone and only the safe ones are counted;
        while the spool is degraded an append touches the disk once per ``retry_s`` and
        returns 0 in between.
        """
        encoded = [r.encode() for r in records]
        deadline = None if timeout is None else time.monotonic() + timeout
        failure: OSError | None = None
        with self._lock:
            if not encoded or not self.faults.may_try("append"):
                return 0
            self._start_call_locked()
            try:
                self._append_locked(encoded, wait, deadline)
            except OSError as exc:
                self._rollback_locked(exc)
                failure = exc
            written = self._call_durable
            if written:
                self.appended += written
                self._lock.notify_all()
        # outside the lock: the event hook may publish, and so append again
        if failure is not None:
            self.faults.failed("append", failure)
        elif written:
            self.faults.ok("append")
        return written

    def _append_locked(self, encoded: list[bytes], wait: bool, deadline: float | None) -> None:
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
            self._call_written += 1
            if self.fsync == "always":
                self._sync_locked()
        if self._call_written > self._call_durable:
            self._sync_locked()

    def _start_call_locked(self) -> None:
        self._call_written = self._call_durable = 0
        seg = self._segments[-1] if self._segments else None
        self._mark = (seg.id, seg.size, seg.count) if seg is not None else (0, 0, 0)

    def _rollback_locked(self, exc: OSError) -> None:
        """An append failed: cut the segment being written back to its last synced record.

        The segment is sealed, and only the records synced before the failure are counted.
        """
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()  # what is still buffered is dropped with it
        seg_id, size, count = self._mark
        seg = self._segment_locked(seg_id)
        if seg is not None and not seg.sealed:
            cut = seg.size - size
            seg.size, seg.count, seg.sealed = size, count, True
            self._total -= cut
            self.bytes_written -= cut
            with contextlib.suppress(OSError):
                os.truncate(seg.path, size)  # if this fails too, the reader stops at seg.size
        log.warning(
            "%s: %d of %d records of this batch not spooled: %s",
            self.dir,
            self._call_written - self._call_durable,
            self._call_written,
            exc,
        )

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
        if (
            seg is None
            or seg.sealed
            or self._writer is None
            or (seg.size and seg.size + len(blob) > self.segment_bytes)
        ):
            seg = self._new_segment_locked()
            self._release_consumed_locked()
        assert self._writer is not None
        self._writer.write(blob)
        seg.size += len(blob)
        self._total += len(blob)
        seg.count += 1
        self.bytes_written += len(blob)

    def _new_segment_locked(self) -> Segment:
        """Seal the active segment (synced: its records are safe) and open the next one.

        An ``OSError`` leaves no writer open.
        """
        if self._writer is not None:
            self._sync_locked()
            writer, self._writer = self._writer, None
            writer.close()
        if self._segments:
            self._segments[-1].sealed = True
        seg_id = self._next_id
        self._next_id += 1
        path = segment_path(self.dir, seg_id)
        self._writer = open(path, "ab")  # noqa: SIM115 - lives as long as the segment
        if self.fsync != "never":
            self._sync_dir()
        seg = Segment(seg_id, path, sealed=False)
        self._segments.append(seg)
        self._mark = (seg_id, 0, 0)
        return seg

    def _sync_locked(self) -> None:
        """Flush the active segment: every record written so far is safe.

        It is fsynced too unless ``fsync: never``.
        """
        if self._writer is None:
            return
        self._writer.flush()
        if self.fsync != "never":
            os.fsync(self._writer.fileno())
        seg = self._segments[-1]
        self._mark = (seg.id, seg.size, seg.count)
        self._call_durable = self._call_written

    def _sync_dir(self) -> None:
        with contextlib.suppress(OSError):
            fsync_dir(self.dir)

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

    def _forget_segment_locked(self, seg: Segment) -> None:
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
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:  # left behind: recovery deletes it as acknowledged
            log.warning("%s: cannot delete acknowledged segment: %s", path, exc)

    # ---------------------------------------------------------------- read / ack
    def read(self, max_records: int = 64) -> list[tuple[SpoolToken, SpoolRecord]]:
        """Up to ``max_records`` records not yet handed out, oldest first."""
        out: list[tuple[SpoolToken, SpoolRecord]] = []
        failure: OSError | None = None
        with self._lock:
            if not self.faults.may_try("read"):
                return out
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
                try:
                    self._read_segment_locked(seg, max_records - len(out), out)
                except OSError as exc:
                    if self._read_failed_locked(seg, exc):
                        continue  # set aside: go on with the next segment
                    failure = exc
                    break
                self._read_failures.pop(seg.id, None)
        if failure is not None:
            self.faults.failed("read", failure)
        elif out:
            self.faults.ok("read")
        return out

    def _read_failed_locked(self, seg: Segment, exc: OSError) -> bool:
        """A segment could not be read: try again later, or set it aside.

        After ``READ_ATTEMPTS`` failures in a row it is set aside (its unsent records count
        as dropped) and ``True`` is returned.
        """
        if self._reader is not None:
            with contextlib.suppress(OSError):
                self._reader.close()
            self._reader, self._reader_seg = None, -1
        n = self._read_failures[seg.id] = self._read_failures.get(seg.id, 0) + 1
        if n < READ_ATTEMPTS or not seg.sealed:
            return False
        lost = max(seg.count - (self._read.index if self._read.seg == seg.id else 0), 0)
        set_aside(seg.path, f"unreadable {n} times: {exc}")
        self.dropped += lost
        self._segments.remove(seg)
        self._total -= seg.size
        self._read_failures.pop(seg.id, None)
        later = [s.id for s in self._segments if s.id > seg.id]
        if self._read.seg <= seg.id:
            self._read = Position(later[0] if later else self._next_id, 0, 0)
        self._lock.notify_all()
        return True

    def _segment_locked(self, seg_id: int) -> Segment | None:
        for seg in self._segments:
            if seg.id == seg_id:
                return seg
        return None

    def _read_segment_locked(
        self, seg: Segment, limit: int, out: list[tuple[SpoolToken, SpoolRecord]]
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

    def discard(self, token: SpoolToken) -> None:
        """The record of ``token`` can never be delivered: let it go, counted in ``dropped``."""
        self.ack(token)
        with self._lock:
            self.dropped += 1

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
        """Persist the cursor, so acknowledged records are not sent again.

        An atomic replace; fsynced with ``fsync="always"`` only.
        """
        with self._lock:
            if not self._cursor_dirty or not self.faults.may_try("commit"):
                return
            try:
                atomic_write(
                    self.dir / CURSOR_NAME,
                    encode_cursor(self._cursor),
                    fsync=self.fsync == "always",
                )
                self._cursor_dirty = False
                failure = None
            except OSError as exc:  # still dirty: the next commit tries again
                failure = exc
        if failure is not None:
            self.faults.failed("commit", failure)
        else:
            self.faults.ok("commit")

    def _probe_disk(self) -> None:
        """A small write where the segments go (the state ends only when one works)."""
        probe = self.dir / PROBE_NAME
        atomic_write(probe, PROBE_BYTES, fsync=False)
        os.unlink(probe)

    def close(self) -> None:
        """Commit the cursor and close files; waiting appenders get :class:`SpoolClosed`."""
        self.faults.close()
        self.faults.retry_now()  # a last attempt now, whatever the pacing says
        self.commit()
        with self._lock:
            self._closed = True
            if self._writer is not None:
                try:
                    self._sync_locked()
                except OSError as exc:
                    log.error("%s: last spool segment not synced at close: %s", self.dir, exc)
                with contextlib.suppress(OSError):
                    self._writer.close()
                self._writer = None
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self._lock.notify_all()
            self._release_lock()
