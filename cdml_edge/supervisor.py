"""Supervision of the agent's long-lived threads: a death is never silent.

Every thread that must run for the agent's lifetime (folder watches, windowers' timers,
pipeline workers, the MQTT I/O loop, the health loop) is started through
:meth:`Supervisor.spawn` instead of ``threading.Thread``. When its target raises, the part is
*dead*: the death is logged and handed to ``on_death`` (the agent counts it, publishes an
error event), and the target is called again after a capped exponential backoff
(``backoff_min`` doubling up to ``backoff_max``; reset once a run lasted ``stable_after``).
From the death until the target has run again for ``alive_after`` seconds the part is
listed by :meth:`Supervisor.dead` (a thread that dies again at once on every restart stays
dead): ``/healthz`` answers 503 and the systemd watchdog is not fed meanwhile.

A target that returns is finished, not dead. ``join()`` on a supervised thread (what an
owner does when it stops the part) cancels a pending restart. Any component takes a
``spawn`` callable (:data:`Spawn`); :func:`plain_thread` is the unsupervised default.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from cdml_edge.backoff import backoff_delay
from cdml_edge.errors import CdmlError

log = logging.getLogger(__name__)

DeathHook = Callable[[str, BaseException, float], None]
"""``(part, exception, seconds until the restart)``."""
RestartHook = Callable[[str], None]


class Worker(Protocol):
    """What an owner does with its thread: start it, see it alive, join it."""

    name: str

    def start(self) -> None:
        """Start the thread."""
        ...

    def is_alive(self) -> bool:
        """Whether the thread runs now."""
        ...

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds (None: for ever) for the thread to end."""
        ...


Spawn = Callable[[str, Callable[[], None]], Worker]
"""``spawn(name, target)``: a thread (not started yet) running ``target``."""


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the OS too (``top -H``, ``ps -L``; 15 bytes).

    Linux only (``prctl(PR_SET_NAME)``); elsewhere, or if it fails, nothing happens.
    """
    if _PRCTL is None:
        return
    with contextlib.suppress(OSError, ValueError, ctypes.ArgumentError):
        _PRCTL(15, name.encode("utf-8", "replace")[:15], 0, 0, 0)  # 15: PR_SET_NAME


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def plain_thread(name: str, target: Callable[[], None]) -> Worker:
    """An unsupervised daemon thread (the default where no supervisor is given)."""

    def named() -> None:
        name_os_thread(name)
        target()

    return threading.Thread(target=named, name=name, daemon=True)


class Supervisor:
    """Starts supervised threads and knows which parts are dead (thread-safe)."""

    def __init__(
        self,
        *,
        backoff_min: float = 0.5,
        backoff_max: float = 30.0,
        stable_after: float = 60.0,
        alive_after: float = 1.0,
        on_death: DeathHook | None = None,
        on_restart: RestartHook | None = None,
    ) -> None:
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.stable_after = stable_after
        self.alive_after = alive_after
        self.on_death = on_death
        self.on_restart = on_restart
        self.on_spawn: Callable[[str], None] | None = None  # told each part's name once made
        self._lock = threading.Lock()
        self._dead: dict[str, float | None] = {}  # part -> monotonic time of its restart
        self._restarts: dict[str, int] = {}
        self._threads: list[SupervisedThread] = []
        self._closed = False

    def spawn(self, name: str, target: Callable[[], None]) -> SupervisedThread:
        """A supervised thread named ``name`` running ``target`` (call ``start()``)."""
        t = SupervisedThread(self, name, target)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive() or not x.started]
            self._threads.append(t)
        if self.on_spawn is not None:
            self.on_spawn(name)
        return t

    @property
    def restarts(self) -> dict[str, int]:
        """Restarts so far, per part."""
        with self._lock:
            return dict(self._restarts)

    def dead(self) -> list[str]:
        """The parts dead now: died, and not running again for ``alive_after`` yet."""
        now = time.monotonic()
        with self._lock:
            for name, since in list(self._dead.items()):
                if since is not None and now - since >= self.alive_after:
                    del self._dead[name]
            return sorted(self._dead)

    def healthy(self) -> bool:
        """No part is dead."""
        return not self.dead()

    def close(self) -> None:
        """No more restarts (the agent is stopping); running threads are left to their owners."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for t in threads:
            t.cancel()

    # -- called by the threads -------------------------------------------------------------
    def _died(self, name: str, exc: BaseException, delay: float, cancelled: bool) -> None:
        if cancelled or self._closed:
            log.error(
                "%s failed while stopping: %s: %s", name, type(exc).__name__, exc, exc_info=exc
            )
            return
        with self._lock:
            self._dead[name] = None
        log.error(
            "%s died: %s: %s; restart in %.1f s",
            name,
            type(exc).__name__,
            exc,
            delay,
            exc_info=None if isinstance(exc, CdmlError) else exc,  # a typed error says it all
        )
        self._call(self.on_death, name, exc, delay)

    def _restarting(self, name: str) -> None:
        with self._lock:
            if name in self._dead:
                self._dead[name] = time.monotonic()
            self._restarts[name] = self._restarts.get(name, 0) + 1
        log.warning("%s restarted", name)
        self._call(self.on_restart, name)

    def _finished(self, name: str) -> None:
        with self._lock:
            self._dead.pop(name, None)

    @staticmethod
    def _call(hook: Callable[..., None] | None, *args: object) -> None:
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:  # a reporting hook must never take the supervised thread down
            log.exception("supervisor hook failed")


class SupervisedThread:
    """A daemon thread that calls its target again after each unexpected death."""

    def __init__(self, sup: Supervisor, name: str, target: Callable[[], None]) -> None:
        self.name = name
        self._sup = sup
        self._target = target
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def started(self) -> bool:
        """:meth:`start` was called."""
        return self._thread.ident is not None

    def start(self) -> None:
        """Start the thread (once only, as ``Thread.start``)."""
        self._thread.start()

    def is_alive(self) -> bool:
        """Whether the thread runs now, including while it waits to restart its target."""
        return self._thread.is_alive()

    def cancel(self) -> None:
        """No restart after the current run (a pending backoff ends now)."""
        self._cancel.set()

    def join(self, timeout: float | None = None) -> None:
        """Cancel any restart, then wait for the thread like ``Thread.join``."""
        self.cancel()
        if self.started:
            self._thread.join(timeout)

    def _run(self) -> None:
        name_os_thread(self.name)
        failures = 0
        while True:
            began = time.monotonic()
            try:
                self._target()
            except BaseException as exc:  # noqa: BLE001 - a death of any kind is supervised
                if time.monotonic() - began >= self._sup.stable_after:
                    failures = 0
                failures += 1
                delay = backoff_delay(failures - 1, self._sup.backoff_min, self._sup.backoff_max)
                self._sup._died(self.name, exc, delay, self._cancel.is_set())
                if self._cancel.wait(delay):
                    self._sup._finished(self.name)
                    return
                self._sup._restarting(self.name)
                continue
            self._sup._finished(self.name)
            return
