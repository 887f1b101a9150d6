"""The agent's output, watched by the activity board (the status page's source)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from cdml_edge.health.board import ActivityBoard
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.factory import TeeOutput
from cdml_edge.window.topics import OutMessage, split_topic

log = logging.getLogger(__name__)


class ObservedOutput(TeeOutput):
    """``output`` unchanged, each message also shown to ``board``.

    The board gets a copy parsed from its JSON; a message the board cannot read is skipped,
    never refused.
    """

    def __init__(self, output: Output, board: ActivityBoard) -> None:
        super().__init__([output])
        self.board = board

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        """Publish ``messages`` on the output, then show each to the board."""
        self.outputs[0].publish_batch(messages, on_durable, on_given_up)
        for m in messages:
            try:
                kind, source = split_topic(m.topic)
                self.board.observe(kind, source, json.loads(m.payload))
            except Exception:  # noqa: BLE001 - the board is a view, never a failure
                log.debug("board skipped a message on %s", m.topic, exc_info=True)
