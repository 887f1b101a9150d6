"""Several outputs behind one: every message to each, durable once durable in all.

A window (a batch with ``on_durable`` or ``on_given_up``) that one part refuses after another
took it is not refused: it is held for the part that refused it and given to that part alone
again, after 1 s, 2 s, 4 s ... at most every 30 s (and before any new window), until it
takes it. A retry of the whole window by the caller would give it again to the parts that
had it: a subscriber of the broker would get the same results once per retry. While a
part holds windows, a new window is refused as a whole (no part gets it, the caller
retries it later), so what is held stays bounded by the windows in flight when the part
began to fail. A window that no part took is refused at once, as the first part's error.

A batch without callbacks (health, status, error events: nobody retries them) goes to every
part that holds nothing; the first error is raised once all were tried.

A held window stays in flight for its caller, so a drain (the agent's stop or reload) would
wait for it until its timeout. :meth:`TeeOutput.give_up_held` ends that: each held window
gets a last try, and what its part still refuses is given up (``on_given_up`` once the other
parts settled it): not durable, its files stay for the next run. :meth:`TeeOutput.stop` does
it before it stops the outputs. A part that takes a given-up window later (a retry under way
then) settles nothing: its window was settled once.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cdml_edge.backoff import backoff_delay
from cdml_edge.outputs.base import Output
from cdml_edge.window.topics import OutMessage

log = logging.getLogger(__name__)

RETRY_S = 1.0  # a held window's first retry, doubling
RETRY_MAX_S = 30.0  # ... up to this


class _Settle:
    """Counts the parts that settled a batch; its callback fires once all did.

    Each part settles through its own :class:`_Share`, at most once.
    """

    def __init__(
        self,
        parts: int,
        on_durable: Callable[[], None] | None,
        on_given_up: Callable[[], None] | None,
    ) -> None:
        self._left = parts
        self._gave_up = False
        self._lock = threading.Lock()
        self._on_durable, self._on_given_up = on_durable, on_given_up

    def durable(self) -> None:
        self._settled(False)

    def given_up(self) -> None:
        self._settled(True)

    def _settled(self, given_up: bool) -> None:
        with self._lock:
            self._left -= 1
            self._gave_up = self._gave_up or given_up
            done, failed = self._left == 0, self._gave_up
        callback = self._on_given_up if failed else self._on_durable
        if done and callback is not None:
            callback()

    def share(self) -> _Share:
        """One part's say in the batch: its first ``durable`` or ``given_up`` counts."""
        return _Share(self)


class _Share:
    """One part's settling of a batch; only the first call counts."""

    def __init__(self, settle: _Settle) -> None:
        self._settle = settle
        self.batch = settle  # what the parts' shares of one batch have in common
        self._lock = threading.Lock()
        self._done = False

    def durable(self) -> None:
        if self._claim():
            self._settle.durable()

    def given_up(self) -> None:
        if self._claim():
            self._settle.given_up()

    def _claim(self) -> bool:
        with self._lock:
            first, self._done = not self._done, True
        return first


@dataclass(frozen=True)
class _Held:
    """A window one part refused after another took it, with that part's share of it."""

    messages: Sequence[OutMessage]
    share: _Share


@dataclass
class _Part:
    output: Output
    held: deque[_Held] = field(default_factory=deque)
    error: Exception | None = None  # why the oldest held window was refused last


class TeeOutput:
    """Several outputs; ``on_durable`` fires once every one of them made the batch durable."""

    def __init__(
        self,
        outputs: Sequence[Output],
        retry_s: float = RETRY_S,
        retry_max_s: float = RETRY_MAX_S,
    ) -> None:
        self.outputs = list(outputs)
        self._parts = [_Part(o) for o in self.outputs]
        self._retry_s, self._retry_max_s = retry_s, retry_max_s
        self._lock = threading.Lock()  # the parts' held windows and the timer
        self._retrying = threading.Lock()  # one thread gives held windows again at a time
        self._timer: threading.Timer | None = None
        self._retries = 0  # in a row that left a window held: the backoff
        self._stopped = False

    def start(self) -> None:
        """Start every output, in order."""
        for o in self.outputs:
            o.start()

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        """Hand ``messages`` to every output; ``on_durable`` once all made them durable.

        ``on_given_up`` instead, once all settled, when any of them gave up. See the module
        for a part that refuses them.
        """
        window = on_durable is not None or on_given_up is not None
        self.retry_held()
        if window:
            refused = self._holding_error()
            if refused is not None:  # given to no part: the caller takes it again later
                raise refused
        settle = _Settle(len(self._parts), on_durable, on_given_up)
        taken = 0
        first: Exception | None = None
        for part in self._parts:
            if not window and part.held:
                first = first or self._again(part.error)
                continue
            share = settle.share()
            try:
                part.output.publish_batch(messages, share.durable, share.given_up)
                taken += 1
            except Exception as exc:
                if window and taken == 0:
                    raise  # no part has it: refused as a whole
                if window:
                    self._hold(part, _Held(messages, share), exc)
                else:
                    first = first or exc
        if first is not None:
            raise first

    def retry_held(self) -> None:
        """Give each part its held windows again, oldest first, until one is refused."""
        if not self._retrying.acquire(blocking=False):
            return  # another thread does it now
        try:
            for part in self._parts:
                self._retry_part(part)
        finally:
            self._retrying.release()

    def _retry_part(self, part: _Part) -> None:
        while True:
            with self._lock:
                if not part.held:
                    return
                head = part.held[0]
            try:
                part.output.publish_batch(head.messages, head.share.durable, head.share.given_up)
            except Exception as exc:  # noqa: BLE001 - kept, raised to whoever brings a window
                with self._lock:
                    part.error = exc
                return
            with self._lock:
                if part.held and part.held[0] is head:  # else given up meanwhile
                    part.held.popleft()
                if not part.held:
                    part.error = None
                    log.info("%s takes windows again", _name(part.output))

    def _hold(self, part: _Part, held: _Held, exc: Exception) -> None:
        """``part`` refused a window another part took: it alone gets it again, later."""
        with self._lock:
            first = not part.held
            part.held.append(held)
            part.error = exc
        if first:
            log.error(
                "%s refused a window the other outputs took (%s): it alone gets it again, "
                "and new windows wait until it takes it",
                _name(part.output),
                exc,
            )
        self._schedule()

    def _holding_error(self) -> Exception | None:
        """The error of the first part that still holds windows (a fresh copy), else None."""
        with self._lock:
            for part in self._parts:
                if part.held:
                    return self._again(part.error)
        return None

    @staticmethod
    def _again(exc: Exception | None) -> Exception:
        """A copy of ``exc`` to raise once more (its own traceback, the original's type)."""
        if exc is None:
            return RuntimeError("an output holds windows it refused")
        try:
            return copy.copy(exc).with_traceback(None)
        except Exception:  # noqa: BLE001 - an exception that cannot be copied
            return RuntimeError(f"{type(exc).__name__}: {exc}")

    def _schedule(self) -> None:
        """Retry the held windows after the backoff (one timer at a time)."""
        with self._lock:
            if self._timer is not None or self._stopped:
                return
            delay = backoff_delay(self._retries, self._retry_s, self._retry_max_s)
            self._retries += 1
            self._timer = threading.Timer(delay, self._tick)
            self._timer.daemon = True
            self._timer.start()

    def _tick(self) -> None:
        with self._lock:
            self._timer = None
        self.retry_held()
        if self.held:
            self._schedule()
        else:
            with self._lock:
                self._retries = 0

    @property
    def held(self) -> int:
        """Windows held now for parts that refused them (each part's counted)."""
        with self._lock:
            return sum(len(p.held) for p in self._parts)

    @property
    def held_windows(self) -> int:
        """Windows held now, each once however many parts hold it."""
        with self._lock:
            return len({id(h.share.batch) for p in self._parts for h in p.held})

    def stats(self) -> dict[str, int]:
        """The outputs' counters, summed by name."""
        out: dict[str, int] = {}
        for o in self.outputs:
            for k, v in o.stats().items():
                out[k] = out.get(k, 0) + v
        return out

    def give_up_held(self) -> int:
        """A last try for each held window, then give up what is still refused; how many.

        A given-up window is not durable: ``on_given_up`` fires once its other parts settled
        it, and its files stay for the next run. Nothing then waits for it (a drain).
        """
        self.retry_held()
        with self._lock:
            given = [h for p in self._parts for h in p.held]
            for part in self._parts:
                part.held.clear()
                part.error = None
        if given:
            log.warning(
                "%d window(s) not taken by every output: given up, their files stay for the "
                "next run",
                len(given),
            )
        for held in given:
            held.share.given_up()
        return len(given)

    def stop(self, timeout: float = 5.0) -> None:
        """Give up held windows after a last try, then stop every output, in order.

        A retry under way (the timer's) is waited for, ``timeout`` at most, before the last
        try and before the outputs stop; each output gets ``timeout``. See
        :meth:`give_up_held`.
        """
        with self._lock:
            self._stopped = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._retrying.acquire(timeout=timeout):  # a retry under way (the timer's) ends
            self._retrying.release()  # before the last try and before the outputs stop
        self.give_up_held()
        for o in self.outputs:
            o.stop(timeout)


def _name(output: Output) -> str:
    """The output as a log line names it: its path or broker when it has one."""
    where = getattr(output, "path", None) or getattr(output, "broker_url", None)
    return f"output {where}" if where else f"output {type(output).__name__}"
