"""``LiveWatch``: the agent's folder source and windower, with a Python callback at the end.

Files are taken by :class:`~cdml_edge.intake.folder.FolderSource` (stable-file
detection, regular files only, the in-flight :class:`~cdml_edge.intake.budget.ByteBudget`,
a byte-bounded quarantine for files that cannot be taken) and grouped by a
:class:`~cdml_edge.intake.windower.Windower`. One worker thread hands each closed window to
``handler``, in order. When the handler returns, the window's input files (and the output
path it returned, if any) are deleted (``auto_delete``, only the version that was read) or
left on disk and not taken again unless they change; when it raises, the error is logged and
counted and the files stay.

The queue between the windower and the worker is bounded by the budget: every item holds
its bytes (at least :data:`MIN_ITEM_CHARGE`, so empty files count too) until its window is
finished, so intake pauses (files wait on disk) while the handler is behind.

:meth:`LiveWatch.stop` may be called from any thread, the handler's own included (it then
returns at once; the watch ends when the handler returns). A handler that raises
``SystemExit`` or ``KeyboardInterrupt`` fails its window and ends the watch, as ``stop``
does. ``stop`` waits at most :data:`STOP_WAIT_S` for a callback still running (one that
blocks would otherwise hold a Ctrl-C'd program for ever): it then warns, naming the callback,
and returns; the watch's threads are daemons, so the interpreter can still exit. Once stop
has given up, nothing is deleted: the files of the window whose callback was running (when
it returns later) and of the windows queued behind it (never handed over) stay on disk,
counted in ``stats.abandoned`` and logged.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from cdml_edge.fsio import log_name
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.intake.folder import FolderSource, FolderSpec
from cdml_edge.intake.windower import Windower
from cdml_edge.live.settings import WatchSettings
from cdml_edge.modality import modality_for
from cdml_edge.supervisor import Supervisor
from cdml_edge.window.items import Item, Window

log = logging.getLogger(__name__)

DATA_COPIES = 2  # an item's bytes, and the archive (or the handler's copy) made of them
MIN_ITEM_CHARGE = 2048
"""Budget bytes a file in flight holds at least: its item, path, identity and queue entry
(measured at about 1.7 kB each) besides its data, so that empty files are bounded too."""

STOP_WAIT_S = 10.0
"""How long :meth:`LiveWatch.stop` waits by default for the callback to return."""

Handler = Callable[[Window], "Path | None"]
"""Handles one window; may return the path of an output it wrote for it (deleted with the
window's inputs under ``auto_delete``)."""


class LiveBudget(ByteBudget):
    """The in-flight byte budget of one watch: each file charged at least ``MIN_ITEM_CHARGE``."""

    def cost(self, nbytes: int, modality: str) -> int:
        """Its data copies, or :data:`MIN_ITEM_CHARGE` when that is more."""
        return max(super().cost(nbytes, modality), MIN_ITEM_CHARGE)


@dataclass
class WatchStats:
    """Counters of one watch (read them while it runs or after)."""

    files: int = 0  # files handed to the callback that returned without error
    batches: int = 0  # windows handled without error
    bytes: int = 0  # bytes of those files
    callback_errors: int = 0  # windows whose callback raised (their files stay on disk)
    input_errors: int = 0  # files that could not be taken (see quarantined)
    quarantined: int = 0
    deleted: int = 0  # inputs deleted by auto_delete
    delete_errors: int = 0  # inputs auto_delete could not delete (they stay, not taken again)
    abandoned: int = 0  # inputs of windows stop() gave up on: never deleted, they stay
    errors: list[str] = field(default_factory=list)  # the last few error messages

    def note(self, message: str, keep: int = 20) -> None:
        """Add ``message`` to ``errors``, keeping the last ``keep``."""
        self.errors = [*self.errors[-(keep - 1) :], message]


class LiveWatch:
    """A running watch of one folder (see the module docstring); a context manager."""

    def __init__(
        self, settings: WatchSettings, handler: Handler, callback_name: str | None = None
    ) -> None:
        self.settings = settings
        self.stats = WatchStats()
        self._handler = handler
        self.callback_name = callback_name or callable_name(handler)
        self._current: str | None = None  # the window the callback is handling
        self._gave_up = False  # stop() returned while the worker had windows to finish
        self._in_callback = False  # the worker is inside the callback (under ``_state``)
        self._state = threading.Lock()  # orders _gave_up against a callback's return
        self._queue: queue.Queue[Window | None] = queue.Queue()
        self._stopped = threading.Event()
        self._closed = False
        self._closing = threading.Lock()
        self.supervisor = Supervisor(on_death=self._died)
        self.budget = LiveBudget(settings.max_inflight_bytes, data_factor=DATA_COPIES)
        self.lifecycle = FileLifecycle(settings.quarantine, settings.quarantine_max_bytes)
        self.windower = Windower(
            settings.name, settings.window, self._queue.put, spawn=self.supervisor.spawn
        )
        spec = FolderSpec(
            name=settings.name,
            path=Path(settings.folder),
            modality="binary",
            patterns=settings.patterns,
            stable_seconds=settings.stable_seconds,
            polling=settings.polling,
            recursive=settings.recursive,
            max_file_bytes=settings.window.max_bytes,
        )
        self.source = FolderSource(
            spec, self.budget, self._intake, self._input_error, spawn=self.supervisor.spawn
        )
        self._worker = threading.Thread(
            target=self._work, name=f"live-{settings.name}", daemon=True
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> LiveWatch:
        """Start watching (returns at once); :meth:`stop` ends it."""
        self._worker.start()
        self.windower.start()
        self.source.start()
        return self

    def stop(self, timeout: float | None = STOP_WAIT_S) -> WatchStats:
        """Stop taking files, hand the open window to the callback, wait for it; idempotent.

        From any thread. Called by the callback itself, it returns at once: the watch ends
        once the callback has returned (and the windows closed meanwhile are handled).
        Waits at most ``timeout`` seconds (``None``: for ever); a callback still running
        then is named in a warning (and ``stats.errors``) and left to its daemon thread, and
        from then on nothing is deleted: its window's files, and those of the windows queued
        behind it (not handed over), stay on disk (``stats.abandoned``).
        """
        self._stopped.set()
        with self._closing:
            closing, self._closed = not self._closed, True
        if closing:
            self.source.stop()
            self.windower.stop()  # closes the open window: it goes to the queue
            self._queue.put(None)
        if self._worker.ident is not None and threading.current_thread() is not self._worker:
            self._worker.join(timeout)
            with self._state:
                running = self._worker.is_alive()
                self._gave_up = self._gave_up or running
                in_callback = self._in_callback
            if running:
                self._left_running(timeout, in_callback)
        return self.stats

    def _left_running(self, timeout: float | None, in_callback: bool) -> None:
        """Warn that the worker is still busy after ``timeout``: stop returns anyway.

        In the callback: its files stay. Else the callback returned in time and its batch
        is being finished as usual; only the batches queued behind it stay.
        """
        what = self._current or "the last batch"
        if in_callback:
            message = (
                f"callback {self.callback_name} still running on {what} after "
                f"{timeout or 0:g} s; stop() returns without it (its files, and those of "
                "batches queued behind it, stay on disk, never deleted; a daemon thread: it "
                "does not hold the interpreter's exit)"
            )
        else:
            message = (
                f"still finishing {what} after {timeout or 0:g} s (its callback returned: "
                "its files are handled as usual); stop() returns, the files of batches "
                "queued behind it stay on disk, never deleted"
            )
        self.stats.note(message)
        log.warning("%s: %s", self.settings.name, message)

    @property
    def running(self) -> bool:
        """Whether the worker is alive and the watch not stopped."""
        return self._worker.is_alive() and not self._stopped.is_set()

    def wait(self, duration: float | None = None, stop: threading.Event | None = None) -> None:
        """Block until ``duration`` seconds passed, ``stop`` is set or :meth:`stop` was called.

        Ctrl-C (KeyboardInterrupt) ends the wait too.
        """
        end = None if duration is None else time.monotonic() + duration
        try:
            while not self._stopped.is_set() and not (stop is not None and stop.is_set()):
                left = 0.2 if end is None else min(0.2, end - time.monotonic())
                if left <= 0:
                    return
                self._stopped.wait(left)
        except KeyboardInterrupt:
            log.info("%s: interrupted, stopping", self.settings.name)

    def run(self, duration: float | None = None, stop: threading.Event | None = None) -> WatchStats:
        """Start, block as :meth:`wait` does, then stop (the last batch is handled)."""
        self.start()
        try:
            self.wait(duration, stop)
        finally:
            self.stop()
        return self.stats

    def __enter__(self) -> LiveWatch:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- intake ----------------------------------------------------------------------------
    def _intake(self, item: Item) -> None:
        item.modality = modality_for(item.name)
        self.windower.add(item)

    def _input_error(
        self, source: str, name: str | None, exc: Exception, path: Path | None
    ) -> None:
        """A file that could not be taken: counted, quarantined when the error says so.

        The end of a state (a folder readable again) is noted, not counted.
        """
        self.stats.input_errors += bool(getattr(exc, "failure", True))
        self.stats.note(str(exc))
        log.warning("%s: %s", source, log_name(exc))
        if path is None or not getattr(exc, "quarantine", False):
            return
        if self.lifecycle.quarantine(source, name or path.name, path) is not None:
            self.stats.quarantined += 1

    def _died(self, part: str, exc: BaseException, delay: float) -> None:
        self.stats.note(f"{part} died: {type(exc).__name__}: {exc}; restart in {delay:.1f} s")

    # -- the worker ------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            window = self._queue.get()
            if window is None:
                return
            self._current = window.window_id
            try:
                self._handle(window)
            finally:
                self._current = None
                self.budget.release(window.take_charge())

    def _handle(self, window: Window) -> None:
        with self._state:
            gave_up = self._gave_up
            self._in_callback = not gave_up
        if gave_up:  # queued behind a callback stop() gave up on: not handed over
            self._abandon(window, "not handed to the callback: stop() had given up")
            return
        try:
            output = self._handler(window)
        except Exception as exc:
            self._left_callback()
            self.stats.callback_errors += 1
            self.stats.note(f"{window.window_id}: {type(exc).__name__}: {exc}")
            log.exception(
                "%s: callback failed for %s; its %d file(s) stay on disk",
                self.settings.name,
                window.window_id,
                len(window.items),
            )
            self._finish(window, delete=False)
            return
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: failed, and the end
            self._left_callback()
            self.stats.callback_errors += 1
            self.stats.note(f"{window.window_id}: {type(exc).__name__}: {exc}; watch stopped")
            log.error(
                "%s: callback raised %s for %s; its %d file(s) stay on disk; stopping",
                self.settings.name,
                type(exc).__name__,
                window.window_id,
                len(window.items),
            )
            self._finish(window, delete=False)
            self.stop()
            return
        with self._state:  # decided once: a stop() giving up now keeps these files
            gave_up, self._in_callback = self._gave_up, False
        if gave_up:
            self._abandon(window, f"callback {self.callback_name} returned after stop() gave up")
            return
        self.stats.batches += 1
        self.stats.files += len(window.items)
        self.stats.bytes += window.nbytes
        self._finish(window, delete=self.settings.auto_delete)
        if self.settings.auto_delete and output is not None:
            output.unlink(missing_ok=True)

    def _left_callback(self) -> None:
        with self._state:
            self._in_callback = False

    def _abandon(self, window: Window, why: str) -> None:
        """Leave a window's files on disk (and any output): stop() did not wait for them."""
        kept = sum(1 for it in window.items if it.path is not None)
        self.stats.abandoned += kept
        message = f"{why} on {window.window_id}; its {kept} file(s) stay on disk, not deleted"
        self.stats.note(message)
        log.warning("%s: %s", self.settings.name, message)
        self._finish(window, delete=False)

    def _finish(self, window: Window, delete: bool) -> None:
        """Delete the inputs that were read (only that version), or leave them untaken."""
        for it in window.items:
            if it.path is None:
                continue
            if delete:
                self._delete(it.path, it)
            self.source.release(it.path, keep=not delete)

    def _delete(self, path: Path, item: Item) -> None:
        """Delete the version of ``path`` that was read; a failure is counted and noted."""
        deleted, failures = self.lifecycle.deleted, self.lifecycle.failures
        self.lifecycle.finish(path, "delete", identity=item.identity)
        self.stats.deleted += self.lifecycle.deleted - deleted
        if self.lifecycle.failures > failures:  # logged by the lifecycle, with its reason
            self.stats.delete_errors += 1
            self.stats.note(f"{log_name(path)}: not deleted (auto_delete failed; see the log)")


def callable_name(fn: object) -> str:
    """A callable's qualified name (``module.name``) for a log line."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)
