"""Several outputs behind one: every message to each, durable once durable in all."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from cdml_edge.outputs.base import Output
from cdml_edge.window.topics import OutMessage


class TeeOutput:
    """Several outputs; ``on_durable`` fires once every one of them made the batch durable."""

    def __init__(self, outputs: Sequence[Output]) -> None:
        self.outputs = list(outputs)

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

        ``on_given_up`` instead, once all settled, when any of them gave up.
        """
        left = [len(self.outputs)]
        gave_up = [False]
        lock = threading.Lock()

        def settled(given_up: bool) -> None:
            with lock:
                left[0] -= 1
                gave_up[0] = gave_up[0] or given_up
                done, failed = left[0] == 0, gave_up[0]
            callback = on_given_up if failed else on_durable
            if done and callback is not None:
                callback()

        for o in self.outputs:
            o.publish_batch(messages, lambda: settled(False), lambda: settled(True))

    def stats(self) -> dict[str, int]:
        """The outputs' counters, summed by name."""
        out: dict[str, int] = {}
        for o in self.outputs:
            for k, v in o.stats().items():
                out[k] = out.get(k, 0) + v
        return out

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every output, in order, each given ``timeout``."""
        for o in self.outputs:
            o.stop(timeout)
