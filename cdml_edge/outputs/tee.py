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
        self, messages: Sequence[OutMessage], on_durable: Callable[[], None] | None = None
    ) -> None:
        """Hand ``messages`` to every output; ``on_durable`` once all made them durable."""
        left = [len(self.outputs)]
        lock = threading.Lock()

        def one_done() -> None:
            with lock:
                left[0] -= 1
                done = left[0] == 0
            if done and on_durable is not None:
                on_durable()

        for o in self.outputs:
            o.publish_batch(messages, one_done)

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
