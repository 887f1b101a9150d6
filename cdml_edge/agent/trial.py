"""A dry run of a configuration (``cdml-edge test``), with no side effects.

Given files go through the live pipeline. Each file becomes an
:class:`~cdml_edge.window.items.Item` as the folder source makes it
(same name, id and timestamp), the items are grouped into windows of the source's
``window.max_items``, packed with the configured format, read back, decoded and scored by
the configured models (:func:`~cdml_edge.window.score.score_window`, the code the agent
runs). The messages that would be published come back; nothing is published, no file is
deleted, moved or quarantined, nothing is retained and the state folder is not touched.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cdml_edge.agent.runners import DATA_COPIES, window_charges
from cdml_edge.config import AppConfig, ConfigError, SourceConfig
from cdml_edge.decode.limits import DecodeLimits, set_limits
from cdml_edge.fsio import display_name
from cdml_edge.intake.base import FileTooLarge, NotRegularFile
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.folder import arrival_time, is_candidate
from cdml_edge.intake.regular import kind_of
from cdml_edge.modality import default_patterns
from cdml_edge.model.runner import ModelRunner
from cdml_edge.window.configured import pack_and_score
from cdml_edge.window.items import Item, Window, new_window_id
from cdml_edge.window.payloads import item_id
from cdml_edge.window.score import error_event
from cdml_edge.window.topics import OutMessage, Sequencer

DEFAULT_SAMPLE = 5
"""Files ``--source NAME`` takes from the source's folder."""


@dataclass
class TrialReport:
    """What a dry run would have published (topics relative to ``{prefix}/{device}``)."""

    messages: list[OutMessage] = field(default_factory=list)
    items: int = 0
    failures: int = 0

    @property
    def ok(self) -> bool:
        """No item failed."""
        return self.failures == 0


def _patterns(sc: SourceConfig) -> tuple[str, ...]:
    return tuple(sc.patterns) or default_patterns(sc.modality)


def source_named(cfg: AppConfig, name: str, where: str = "<config>") -> SourceConfig:
    """The source called ``name`` (a :class:`ConfigError` lists the names there are)."""
    for sc in cfg.sources:
        if sc.name == name:
            return sc
    known = ", ".join(sc.name for sc in cfg.sources) or "none"
    raise ConfigError(where, [("sources", f"no source named {name!r} (there are: {known})")])


def sample_files(sc: SourceConfig, limit: int = DEFAULT_SAMPLE) -> list[Path]:
    """The first ``limit`` files (by name) that the folder source ``sc`` would take.

    Read only: nothing on disk changes.
    """
    if sc.kind != "folder" or sc.path is None:
        raise ConfigError("<config>", [(f"sources.{sc.name}", "not a folder source")])
    names = sorted(e.name for e in os.scandir(sc.path) if e.is_file(follow_symlinks=False))
    return [sc.path / n for n in names if is_candidate(n, _patterns(sc))][:limit]


def source_for(cfg: AppConfig, path: Path, where: str = "<config>") -> SourceConfig:
    """The source a file belongs to.

    The folder source whose folder holds it, else the only source, else the first whose
    patterns take its name.
    """
    resolved = path.resolve()
    for sc in cfg.sources:
        if sc.path is not None and resolved.is_relative_to(sc.path.resolve()):
            return sc
    if len(cfg.sources) == 1:
        return cfg.sources[0]
    for sc in cfg.sources:
        if is_candidate(path.name, _patterns(sc)):
            return sc
    raise ConfigError(
        where, [("sources", f"{path}: no source takes this file (name one with --source)")]
    )


def file_item(sc: SourceConfig, path: Path, limit: int | None = None) -> Item:
    """``path`` as the folder source ``sc`` would read it (name, id, timestamp).

    Its time is the folder source's arrival rule with the moment it is read here as the
    sighting: a file written long ago arrives now, as a file waiting at start does. A file
    over ``limit`` bytes is :class:`FileTooLarge`, unread, as the folder source refuses it.
    """
    data, st = _read_regular(path, limit)
    read_at = time.time()
    inside = sc.path is not None and path.resolve().is_relative_to(sc.path.resolve())
    raw = os.path.relpath(path.resolve(), sc.path.resolve()) if inside and sc.path else path.name
    return Item(
        source=sc.name,
        name=display_name(raw),
        modality=sc.modality,
        ts=arrival_time(st.st_mtime, read_at),
        data=data,
        item_id=item_id(sc.name, raw, len(data), st.st_mtime_ns, content=data),
        size=len(data),
        mtime_ns=st.st_mtime_ns,
    )


def _read_regular(path: Path, limit: int | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes of ``path`` (links followed: the user named it) and its ``fstat``.

    :class:`NotRegularFile` for a FIFO, socket, device or folder, judged on the opened file
    (opened without blocking: a FIFO is never waited on).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, kind_of(st.st_mode))
        if limit is not None and st.st_size > limit:
            raise FileTooLarge(path, st.st_size, limit)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(), st
    finally:
        os.close(fd)


def run_trial(
    cfg: AppConfig,
    files: Sequence[tuple[SourceConfig, Path]],
    runners: Mapping[str, ModelRunner],
) -> TrialReport:
    """Score ``files`` (each with its source) as the agent would; see the module."""
    report = TrialReport()
    seq = Sequencer()
    set_limits(DecodeLimits.of(cfg.limits))  # decoded as the agent decodes
    by_source: dict[str, list[Item]] = {}
    sources = {sc.name: sc for sc, _ in files}
    limits = {name: admitted_bytes(cfg, sc, runners) for name, sc in sources.items()}
    for sc, path in files:
        try:
            by_source.setdefault(sc.name, []).append(file_item(sc, path, limits[sc.name]))
        except FileTooLarge as exc:  # refused unread, as the folder source does
            report.items += 1
            report.failures += 1
            report.messages.append(
                error_event(
                    sc.name,
                    display_name(path.name),
                    type(exc).__name__,
                    str(exc),
                    device=cfg.device.id,
                    sequencer=seq,
                )
            )
    for name, items in by_source.items():
        sc = sources[name]
        step = sc.window.max_items
        for start in range(0, len(items), step):
            _score(cfg, sc, items[start : start + step], runners, seq, report)
    return report


def admitted_bytes(cfg: AppConfig, sc: SourceConfig, runners: Mapping[str, ModelRunner]) -> int:
    """The largest file the agent takes for ``sc``: what a window and the budget may hold."""
    budget = ByteBudget(cfg.limits.max_inflight_bytes, data_factor=DATA_COPIES)
    window_charges(budget, dict(runners))
    return budget.largest_file(sc.modality, sc.window.max_bytes)


def _score(
    cfg: AppConfig,
    sc: SourceConfig,
    items: list[Item],
    runners: Mapping[str, ModelRunner],
    seq: Sequencer,
    report: TrialReport,
) -> None:
    ts = min(it.ts for it in items)
    window = Window(
        new_window_id(sc.name, ts),
        sc.name,
        ts,
        list(items),
        closed_ts=max(it.ts for it in items),
        reason="test",
    )
    _, outcome = pack_and_score(window, cfg, sc, runners, seq)
    report.messages += outcome.messages(cfg.results_mode())
    report.items += len(items)
    report.failures += len(outcome.failures)
    for f in outcome.failures:
        report.messages.append(
            error_event(
                sc.name, f.item.name, f.error_type, f.message, device=cfg.device.id, sequencer=seq
            )
        )
