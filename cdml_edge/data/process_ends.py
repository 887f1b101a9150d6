"""Processes watched until they end: a call back from one thread asleep in ``poll()``.

Each watched process is a ``pidfd`` (Linux 5.3 and later), readable once the process has
ended. One daemon thread per watcher sleeps in ``poll()`` on them and wakes only when one
ends or a new one is watched, so watching costs no CPU while nothing happens. Where there
is no ``pidfd``, :meth:`ProcessEnds.watch` says so and the caller looks by itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

Watch = Literal["watching", "ended", "unsupported"]
K = TypeVar("K")
_log = logging.getLogger(__name__)


class ProcessEnds(Generic[K]):
    """Calls ``on_end(key)`` from its thread once the process watched as ``key`` has ended."""

    def __init__(self, on_end: Callable[[K], None], name: str) -> None:
        self._on_end = on_end
        self._name = name
        self._lock = threading.RLock()  # held across a fork: see _before_fork
        self._keys: dict[int, K] = {}  # pidfd -> key
        self._poll: select.poll | None = None
        self._wake = (-1, -1)
        _watchers.add(self)

    def watch(self, key: K, pid: int) -> Watch:
        """Watch ``pid`` as ``key``: ``watching``, ``ended`` (already), or ``unsupported``."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return "ended"
        except (AttributeError, OSError):
            return "unsupported"
        with self._lock:
            if self._poll is None:
                self._start()
            assert self._poll is not None
            self._keys[fd] = key
            self._poll.register(fd, select.POLLIN)
            with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
                os.write(self._wake[1], b"w")  # poll() again with this one too
        return "watching"

    def _start(self) -> None:
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._poll = select.poll()
        self._poll.register(self._wake[0], select.POLLIN)
        threading.Thread(target=self._run, args=(self._poll,), name=self._name, daemon=True).start()

    def _run(self, poll: select.poll) -> None:
        while True:
            events = poll.poll()
            ended = []
            with self._lock:
                if poll is not self._poll:
                    return  # forgotten in a fork's child (never runs there) or closed
                for fd, _ in events:
                    if fd == self._wake[0]:
                        while _drained(fd):
                            pass
                        continue
                    poll.unregister(fd)
                    with contextlib.suppress(OSError):  # closed by someone else: gone too
                        os.close(fd)
                    if fd in self._keys:
                        ended.append(self._keys.pop(fd))
            for key in ended:
                try:
                    self._on_end(key)
                except Exception:  # the thread goes on: the next end is told too
                    _log.exception("%s: handling the end of %s failed", self._name, key)

    def forget_in_child(self) -> None:
        """After a fork, in the child: the parent's descriptors closed, nothing watched."""
        fds = [*self._keys, *(fd for fd in self._wake if fd >= 0)]
        self._keys, self._poll, self._wake = {}, None, (-1, -1)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _drained(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


_watchers: weakref.WeakSet[ProcessEnds[Any]] = weakref.WeakSet()
_held: dict[int, list[ProcessEnds[Any]]] = {}  # per forking thread


def _before_fork() -> None:
    """Each watcher's lock, held across the fork.

    The thread closes a descriptor and forgets it under that lock: a fork in between
    would leave the child a number that is closed, or already another descriptor.
    """
    mine = _held.setdefault(threading.get_ident(), [])
    for watcher in list(_watchers):
        watcher._lock.acquire()
        mine.append(watcher)


def _after_in_parent() -> None:
    for watcher in _held.pop(threading.get_ident(), []):
        watcher._lock.release()


def _after_in_child() -> None:
    _held.clear()  # the other threads do not run here
    for watcher in list(_watchers):
        watcher._lock = threading.RLock()
        watcher.forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
