"""The state of a store whose writes fail (a full disk, an I/O error): :class:`DiskFaults`.

Which operations fail, when to try again, one event per episode.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
"""The errors of a full disk (or quota); any other ``OSError`` is an I/O error."""

FaultHook = Callable[[str, dict[str, str]], None]
PROBE_MIN_S = 1.0  # a disk probe runs at most this often
PROBE_BYTES = b"\0" * 65536  # what a probe writes: room for more than a few bytes


class DiskFaults:
    """The write health of one store (``name``: spool, retention, quarantine) in ``where``.

    The store reports each operation that failed (:meth:`failed`) or succeeded (:meth:`ok`).
    While any operation fails the store is *degraded* (:attr:`degraded` says why); the first
    failure of an episode calls ``on_event("{name}_disk_full" | "{name}_io_error", info)``
    and the success that ends it ``on_event("{name}_disk_ok", info)``, each with one log
    line. :meth:`may_try` paces retries: after a failure an operation is tried again only
    every ``retry_s`` seconds, so a full disk costs no busy loop. Thread-safe.

    An operation the store may not try again by itself (an append while the broker is back,
    a ring write on an idle line) would keep the store degraded for good: for the ops in
    ``probe_ops`` a timer calls ``probe()`` (a small write through the store's own write
    path) every ``retry_s`` (``PROBE_MIN_S`` at least) while they fail, and ends their
    failure when it succeeds. A probe that fails is quiet (no count, no event).
    :meth:`close` stops it.
    """

    def __init__(
        self,
        name: str,
        where: str | os.PathLike[str],
        *,
        retry_s: float = 1.0,
        on_event: FaultHook | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[], None] | None = None,
        probe_ops: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.where = str(where)
        self.retry_s = retry_s
        self.on_event = on_event
        self.clock = clock
        self.probe = probe
        self.probe_ops = probe_ops
        self.probes = 0  # probes run (each a small write)
        self._timer: threading.Timer | None = None
        self._closed = False
        self.errors = 0  # failed operations, all episodes together
        self.episodes = 0
        self._failing: dict[str, str] = {}  # operation -> what went wrong
        self._next_try: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def degraded(self) -> str | None:
        """Why the store is degraded now (``None`` when every operation works)."""
        with self._lock:
            if not self._failing:
                return None
            return "; ".join(f"{op}: {why}" for op, why in sorted(self._failing.items()))

    def may_try(self, op: str) -> bool:
        """Whether ``op`` may touch the disk now (always, unless it failed < retry_s ago)."""
        with self._lock:
            return self.clock() >= self._next_try.get(op, 0.0)

    def retry_now(self) -> None:
        """Let every operation touch the disk at once (a last attempt at close)."""
        with self._lock:
            self._next_try.clear()

    def failed(self, op: str, exc: OSError) -> str | None:
        """``op`` failed with ``exc``: degraded until it succeeds again.

        Returns the event kind when this failure began an episode.
        """
        why = f"{exc.strerror or exc} [{errno.errorcode.get(exc.errno or 0, exc.errno)}]"
        with self._lock:
            self.errors += 1
            self._next_try[op] = self.clock() + self.retry_s
            first = not self._failing
            self._failing[op] = why
            if first:
                self.episodes += 1
            if op in self.probe_ops:
                self._arm_locked()
        if not first:
            return None
        kind = f"{self.name}_{'disk_full' if exc.errno in FULL_ERRNOS else 'io_error'}"
        log.error(
            "%s %s: %s failed: %s; degraded, retrying every %.1fs",
            self.name,
            self.where,
            op,
            why,
            self.retry_s,
        )
        self._emit(kind, {"dir": self.where, "op": op, "error": why})
        return kind

    def ok(self, op: str) -> str | None:
        """``op`` succeeded; the episode ends once no operation fails.

        Returns the event kind when this success ended an episode.
        """
        with self._lock:
            self._next_try.pop(op, None)
            if op not in self._failing:
                return None
            del self._failing[op]
            recovered = not self._failing
        if not recovered:
            return None
        kind = f"{self.name}_disk_ok"
        log.warning("%s %s: writes work again (%s)", self.name, self.where, op)
        self._emit(kind, {"dir": self.where, "op": op})
        return kind

    def _arm_locked(self) -> None:
        if self.probe is None or self._timer is not None or self._closed:
            return
        self._timer = threading.Timer(max(self.retry_s, PROBE_MIN_S), self._probe)
        self._timer.daemon = True
        self._timer.start()

    def _probe(self) -> None:
        """Probe the disk for the failing ops in ``probe_ops``; heal them when it works."""
        with self._lock:
            self._timer = None
            ops = [op for op in self.probe_ops if op in self._failing]
            if not ops or self._closed or self.probe is None:
                return
            probe = self.probe
            self.probes += 1
        try:
            probe()
        except Exception:  # still failing (or the probe is broken): quietly again later
            with self._lock:
                self._arm_locked()
            return
        for op in ops:
            self.ok(op)

    def close(self) -> None:
        """Stop probing (the store is closed)."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _emit(self, kind: str, info: dict[str, str]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(kind, info)
        except Exception:  # a broken hook must not break the store
            log.exception("%s: event hook failed for %s", self.name, kind)
