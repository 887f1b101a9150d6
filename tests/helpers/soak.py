"""The fault injector of the soak test and the ledger of what it put on disk.

:class:`Injector` drops files into a watched folder, one random action per tick: good
images (renamed in, or written in place), names that are not UTF-8 or hold control
characters, corrupt images, FIFOs and sockets, links to a canary file outside the folder,
files replaced while their window is in flight and files that keep growing. Timers beside
it restart the broker and fill the small file system of spool, retention and quarantine.
The :class:`Ledger` records every complete version of every file (the bytes, the identity
and the result id the agent must give it) and every special entry, for the invariants.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from cdml_edge.fsio import display_name
from cdml_edge.window.payloads import item_id


def image(rng: random.Random) -> bytes:
    """A small JPEG of a random grey (random sizes: a window holds several)."""
    side = rng.choice((16, 24, 32, 48))
    ok, buf = cv2.imencode(".jpg", np.full((side, side, 3), rng.randrange(256), np.uint8))
    assert ok
    return bytes(buf.tobytes())


@dataclass(frozen=True)
class Version:
    """One complete version of a file: what the agent must score, quarantine or leave."""

    raw: bytes  # the name as bytes
    data: bytes
    id: str  # the result id the agent gives exactly this version
    corrupt: bool

    @property
    def shown(self) -> str:
        return display_name(os.fsdecode(self.raw))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Ledger:
    """Every complete version per name, in order, and the special entries made."""

    source: str
    versions: dict[bytes, list[Version]] = field(default_factory=dict)
    specials: dict[bytes, str] = field(default_factory=dict)  # name -> fifo | socket | link
    actions: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, st: os.stat_result, raw: bytes, data: bytes, corrupt: bool) -> None:
        """A version whose identity is ``st`` (taken before the agent may have moved it)."""
        v = Version(
            raw,
            data,
            item_id(self.source, os.fsdecode(raw), st.st_size, st.st_mtime_ns, content=data),
            corrupt,
        )
        with self.lock:
            self.versions.setdefault(raw, []).append(v)

    def count(self, action: str) -> None:
        with self.lock:
            self.actions[action] = self.actions.get(action, 0) + 1

    def all_ids(self) -> set[str]:
        return {v.id for vs in self.versions.values() for v in vs}

    def finals(self) -> list[Version]:
        return [vs[-1] for vs in self.versions.values()]


class Injector:
    """Random faults into ``folder`` (a watched folder) for as long as it runs."""

    def __init__(self, folder: Path, canary: Path, ledger: Ledger, rng: random.Random) -> None:
        self.folder = os.fsencode(folder)
        self.canary = canary
        self.ledger = ledger
        self.rng = rng
        self.n = 0
        self._writers: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self.actions: list[tuple[Callable[[], None], float]] = [
            (self.good_renamed, 6),
            (self.good_in_place, 2),
            (self.odd_name, 1),
            (self.corrupt, 1),
            (self.replaced_in_flight, 1),
            (self.growing, 0.5),
            (self.fifo, 0.2),
            (self.unix_socket, 0.2),
            (self.link_outside, 0.3),
        ]

    def _path(self, raw: bytes) -> bytes:
        return os.path.join(self.folder, raw)

    def _name(self, prefix: str, ext: bytes = b".jpg") -> bytes:
        self.n += 1
        return f"{prefix}-{self.n:05d}".encode() + ext

    def _rename_in(self, raw: bytes, data: bytes, corrupt: bool = False) -> None:
        tmp = self._path(raw + b".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        st = os.stat(tmp)
        os.rename(tmp, self._path(raw))
        self.ledger.add(st, raw, data, corrupt)

    # -- the actions -----------------------------------------------------------------------
    def step(self) -> None:
        fns, weights = zip(*self.actions, strict=True)
        fn = self.rng.choices(fns, weights)[0]
        self.ledger.count(fn.__name__)
        fn()

    def good_renamed(self) -> None:
        self._rename_in(self._name("good"), image(self.rng))

    def good_in_place(self) -> None:
        raw, data = self._name("direct"), image(self.rng)
        with open(self._path(raw), "wb") as fh:
            fh.write(data)
            fh.flush()
            st = os.fstat(fh.fileno())
        self.ledger.add(st, raw, data, False)

    def odd_name(self) -> None:
        odd = self.rng.choice((b"\xff\xfe", b"\x1b[31m", b"\n", b"\xe2\x80\xae", b"%FF", b"\xc3"))
        self._rename_in(self._name("odd")[:-4] + odd + b".jpg", image(self.rng))

    def corrupt(self) -> None:
        self._rename_in(self._name("bad"), os.urandom(self.rng.randrange(16, 600)), True)

    def replaced_in_flight(self) -> None:
        raw = self._name("swap")
        self._rename_in(raw, image(self.rng))
        time.sleep(self.rng.uniform(0.0, 0.4))
        self._rename_in(raw, image(self.rng))

    def growing(self) -> None:
        """A writer that pauses longer than ``stable_seconds`` between its chunks."""
        raw, data = self._name("grow"), image(self.rng)

        def write() -> None:
            cuts = sorted(self.rng.sample(range(1, len(data)), 2))
            with open(self._path(raw), "wb") as fh:
                for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
                    fh.write(data[a:b])
                    fh.flush()
                    time.sleep(self.rng.uniform(0.4, 0.9))
                st = os.fstat(fh.fileno())
            self.ledger.add(st, raw, data, False)

        t = threading.Thread(target=write, daemon=True)
        t.start()
        self._writers.append(t)

    def fifo(self) -> None:
        raw = self._name("fifo")
        os.mkfifo(self._path(raw))
        self.ledger.specials[raw] = "fifo"

    def unix_socket(self) -> None:
        raw = self._name("sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(self._path(raw))
        except OSError:  # a path longer than sun_path: no socket this time
            s.close()
            return
        self._sockets.append(s)
        self.ledger.specials[raw] = "socket"

    def link_outside(self) -> None:
        raw = self._name("link")
        os.symlink(self.canary, self._path(raw))
        self.ledger.specials[raw] = "link"

    def finish(self) -> None:
        for t in self._writers:
            t.join(10)
        for s in self._sockets:
            s.close()


def run_for(
    seconds: float,
    tick: Callable[[], None],
    period: float,
    stop: threading.Event,
) -> threading.Thread:
    """``tick()`` every ``period`` seconds for ``seconds`` (or until ``stop``), in a thread."""

    def loop() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not stop.is_set():
            tick()
            stop.wait(period)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


class Episodes:
    """Intervals (wall-clock start, end) during which a fault was on."""

    def __init__(self) -> None:
        self.spans: list[list[float]] = []

    def begin(self) -> None:
        self.spans.append([time.time(), float("inf")])

    def end(self) -> None:
        self.spans[-1][1] = time.time()

    def covers(self, t: float, grace: float) -> bool:
        return any(a <= t <= b + grace for a, b in self.spans)


# -- who opened the canary: inotify on the file itself ------------------------------------
IN_ACCESS, IN_OPEN = 0x001, 0x020
IN_NONBLOCK = os.O_NONBLOCK


class OpenWatch:
    """Counts every open and read of one file, by any process (inotify)."""

    def __init__(self, path: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN | IN_ACCESS)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")

    def events(self) -> int:
        n = 0
        while True:
            try:
                buf = os.read(self.fd, 4096)
            except BlockingIOError:
                return n
            off = 0
            while off < len(buf):
                _wd, _mask, _cookie, length = struct.unpack_from("iIII", buf, off)
                off += 16 + length
                n += 1

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
