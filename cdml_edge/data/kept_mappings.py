"""A worker's batch buffers stay mapped in the receiving process from one batch to the next.

A worker's pool hands the same few buffers out again batch after batch
(:mod:`cdml_edge.data.batch_pool`). Mapped anew for every batch, each batch cost the main
process a descriptor fetched from the worker (multiprocessing's resource sharer: a
connection, an authentication, a thread woken in the worker), an ``mmap`` and, as the
batch is read, a page fault per page: 13-14 µs per 224-px uint8 image, four times that in
float32. Kept mapped, a batch that comes back in a buffer seen before costs none of that.

* **Who keeps what.** The receiver keeps a buffer's mapping after its batch is released
  and writes its own token into the buffer's header (``kept``); the worker sends no
  descriptor for a buffer so marked, only its identity (a random word in the header). A
  receiver that does not keep it (another process, or this one over its bound) opens it
  through ``/proc/<worker>/fd/<n>`` instead.
* **Bound.** ``CDML_EDGE_BATCH_MAPPINGS_MIB`` (default 1024, ``0``: none kept) of
  mappings per process. While the workers live their pages are theirs anyway; the bound
  holds what is kept of workers that ended before anything here noticed. When full, a new
  buffer is mapped for its batch only, as before.
* **Forgotten** once no batch uses it and its worker has ended (a thread asleep on the
  workers' process descriptors wakes when one ends: :mod:`cdml_edge.data.process_ends`; without
  ``pidfd``, looked at on each new mapping, release and fork), or its worker's pool forgot
  it (``retired`` in the header, looked at on the same occasions).
* **Forks.** A mapping kept while no batch uses it is not passed to a forked child
  (``MADV_DONTFORK``, set before each fork): the child, a DataLoader worker of the next
  epoch say, would otherwise hold those buffers, and the parent's batches held at the fork
  would wait for it (:mod:`cdml_edge.data.buffer_release`). A mapping a batch uses at the
  fork is passed on, as before. A child starts with nothing kept.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from cdml_edge.data import buffer_release
from cdml_edge.data.batch_pool import RELEASED, RETIRED, SENT, mib_from_env, random_word
from cdml_edge.data.process_ends import ProcessEnds
from cdml_edge.data.shared_mapping import Mapping, pass_to_children

_DEFAULT_MIB = 1024
Sender = tuple[int, int]  # a worker's process id, and a word of its own


def bound_bytes() -> int:
    """The bound in bytes from ``CDML_EDGE_BATCH_MAPPINGS_MIB`` (0: nothing kept)."""
    return mib_from_env("CDML_EDGE_BATCH_MAPPINGS_MIB", _DEFAULT_MIB)


def _token() -> int:
    return random_word() | 1  # never 0: 0 is "kept by none"


@dataclass
class Kept:
    """A buffer's mapping kept here, with its counters; ``in_use`` while a batch uses it."""

    mm: Mapping
    counters: np.ndarray
    sender: Sender
    in_use: bool = True
    forkable: bool = True


class KeptMappings:
    """The buffers kept mapped by this process, keyed by their identity."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.token = _token()
        self.hits = 0
        self.misses = 0
        self._kept: dict[int, Kept] = {}
        self._senders: set[Sender] = set()
        self._unwatched: set[Sender] = set()  # no pidfd here: looked at with os.kill
        self._ended: set[Sender] = set()
        self._ends: ProcessEnds[Sender] = ProcessEnds(self._sender_ended, "cdml-batch-senders")
        self._bytes = 0
        self._lock = threading.RLock()  # a collection inside may release a batch

    def take(self, ident: int) -> Kept | None:
        """The kept mapping of buffer ``ident``, now in use; None if none is kept here."""
        with self._lock:
            kept = self._kept.get(ident)
            if kept is None or kept.in_use:
                self.misses += 1
                return None
            kept.in_use = True
            if not kept.forkable:
                pass_to_children(kept.mm, True)
                kept.forkable = True
            self.hits += 1
            return kept

    def add(self, ident: int, mm: Mapping, counters: np.ndarray, sender: Sender) -> Kept | None:
        """Keep ``mm`` (in use now) if the bound allows; None if not kept.

        ``sender``: the worker's process id and a word of its own (a new process may get
        the id of an ended one).
        """
        with self._lock:
            self._forget_gone()
            if ident in self._kept or self._bytes + len(mm) > self.max_bytes:
                return None
            new_sender = sender not in self._senders
            self._senders.add(sender)
            kept = self._kept[ident] = Kept(mm, counters, sender)
            self._bytes += len(mm)
        if new_sender:  # outside the lock: the watcher's lock is never taken under it
            watched = self._ends.watch(sender, sender[0])
            with self._lock:
                if watched == "ended":
                    self._ended.add(sender)
                elif watched == "unsupported":
                    self._unwatched.add(sender)
        return kept

    def release(self, ident: int) -> None:
        """The batch over buffer ``ident`` is over: kept for the next, or forgotten."""
        with self._lock:
            kept = self._kept.get(ident)
            if kept is None:
                return
            kept.in_use = False
            if _retired(kept.counters, counting=1):  # this release is the last one out
                self._forget(ident)
            self._forget_gone()

    def before_fork(self) -> None:
        """Keep the unused mappings out of the child; forget those of ended workers."""
        with self._lock:
            self._forget_gone()
            for kept in list(self._kept.values()):
                if not kept.in_use and kept.forkable:
                    pass_to_children(kept.mm, False)
                    kept.forkable = False

    def in_child(self) -> list[Mapping]:
        """After a fork, in the child: every mapping handed back, never to be unmapped here.

        Those kept out of the child are not mapped in it: unmapping them could unmap what
        the child mapped at the same address since.
        """
        return [kept.mm for kept in list(self._kept.values())]

    def _sender_ended(self, sender: Sender) -> None:
        with self._lock:
            self._ended.add(sender)
            self._forget_gone()

    def _forget_gone(self) -> None:
        """Forget the unused mappings of ended workers and of buffers their pools retired."""
        # Snapshots throughout: a collection inside may release a batch, which comes here.
        for sender in list(self._unwatched):
            if _has_ended(sender[0]):
                self._unwatched.discard(sender)
                self._ended.add(sender)
        for ident, kept in list(self._kept.items()):
            if not kept.in_use and (kept.sender in self._ended or _retired(kept.counters)):
                self._forget(ident)
        if self._ended:
            still = {k.sender for k in list(self._kept.values())}
            for sender in list(self._ended - still):
                self._ended.discard(sender)
                self._senders.discard(sender)

    def _forget(self, ident: int) -> None:
        kept = self._kept.pop(ident, None)
        if kept is not None:
            self._bytes -= len(kept.mm)  # unmapped once the last array over it is gone

    def __len__(self) -> int:
        return len(self._kept)


def _retired(counters: np.ndarray, counting: int = 0) -> bool:
    """Whether the worker's pool forgot the buffer and no batch of it is on its way here.

    ``counting``: releases about to be counted.
    """
    released = int(counters[RELEASED]) + counting
    return bool(counters[RETIRED]) and int(counters[SENT]) == released


def _has_ended(pid: int) -> bool:
    """Whether ``pid`` has ended, where there is no ``pidfd`` (a zombie still counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


_KEPT: KeptMappings | None = None
_in_children: list[Mapping] = []  # a child's inherited ones: never unmapped there
_lock = threading.Lock()


def kept_mappings() -> KeptMappings:
    """This process's kept mappings."""
    global _KEPT
    if _KEPT is None:
        with _lock:
            if _KEPT is None:
                _KEPT = KeptMappings(bound_bytes())
    return _KEPT


def _before_fork() -> None:
    if _KEPT is not None:
        buffer_release.sweep()  # what it releases is unused: kept out of the child too
        _KEPT.before_fork()


def _after_in_child() -> None:
    global _KEPT, _lock
    _lock = threading.Lock()
    kept, _KEPT = _KEPT, None  # first: a child starts with nothing kept, whatever follows
    if kept is not None:
        _in_children.extend(kept.in_child())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_in_child)
