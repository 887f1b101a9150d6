"""A window packed and scored as the configuration says: one rule for the agent and trial."""

from __future__ import annotations

from collections.abc import Mapping

from cdml_edge.config import AppConfig, SourceConfig
from cdml_edge.model.runner import ModelRunner
from cdml_edge.window.items import Window
from cdml_edge.window.pack import PackedWindow, pack_window
from cdml_edge.window.score import WindowOutcome, score_window
from cdml_edge.window.topics import Sequencer


def pack_and_score(
    window: Window,
    cfg: AppConfig,
    source: SourceConfig,
    runners: Mapping[str, ModelRunner],
    sequencer: Sequencer,
) -> tuple[PackedWindow, WindowOutcome]:
    """Pack ``window`` with ``cfg.pack`` and score it with the models of ``source``."""
    packed = pack_window(
        window,
        device=cfg.device.id,
        modality=source.modality,
        archive_format=cfg.pack.format,
        level=cfg.pack.level,
        site=cfg.device.site,
    )
    outcome = score_window(
        packed.archive,
        runners,
        device=cfg.device.id,
        models=cfg.models_of(source),
        segment_rows=source.segment_rows,
        sequencer=sequencer,
        archive_name=packed.name,
        pack_ms=packed.pack_ms,
    )
    return packed, outcome
