"""cdmltrain 1.x's Python live API, built on the agent's folder source and windower.

``watch_and_pack`` hands a callback each packed batch of files; ``watch_in_memory`` each
file as it arrives. See :mod:`cdml_edge.live.api`.
"""

from __future__ import annotations

from cdml_edge.live.api import watch_and_pack, watch_in_memory
from cdml_edge.live.batch import PackedBatch
from cdml_edge.live.settings import WatchSettings, data_type
from cdml_edge.live.watch import LiveWatch, WatchStats

__all__ = [
    "LiveWatch",
    "PackedBatch",
    "WatchSettings",
    "WatchStats",
    "data_type",
    "watch_and_pack",
    "watch_in_memory",
]
