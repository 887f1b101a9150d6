"""``cdml-edge export`` as one call: options in, a training archive written, a summary out.

:func:`run_export` parses the selection (``--filter``, ``--split``, ``--labels``,
``--max-bytes``, ``--since``/``--until``), raising :class:`OptionError` for a usage problem,
then runs :func:`~cdml_edge.retrain.export.export_trainset`, which raises
:class:`ExportError` when no archive can be made.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdml_edge.retrain.errors import ExportError, OptionError
from cdml_edge.retrain.export import ExportStats, export_trainset, output_format
from cdml_edge.retrain.filters import FilterError, ItemFilter, parse_filters, parse_when
from cdml_edge.retrain.layout import parse_split
from cdml_edge.retrain.outfile import check_not_ring_file, check_out
from cdml_edge.retrain.progress import NoProgress, RunProgress
from cdml_edge.retrain.relabels import Relabels, load_relabels
from cdml_edge.units import counted, parse_size


@dataclass(frozen=True)
class ExportOptions:
    """What to export: the command-line options of ``cdml-edge export``."""

    directory: Path
    out: Path
    filters: Sequence[str] = ()  # FIELD OP VALUE, all must hold
    since: str | None = None
    until: str | None = None
    source: str | None = None
    labels: Path | None = None  # relabel CSV
    split: str | None = None  # train/val[/test] fractions, e.g. 0.8/0.1/0.1
    level: int = 3
    max_bytes: str = "2GiB"


@dataclass(frozen=True)
class ExportSummary:
    """What an export run did, and the archive it wrote."""

    stats: ExportStats
    out: Path

    def text(self) -> str:
        """The summary the command prints: a headline, then the counts as one JSON line.

        Then one line per missing or duplicate window (they do not fail the run).
        """
        st = self.stats
        head = (
            f"exported {counted(st.exported, 'item')} from {counted(st.windows, 'window')} "
            f"-> {self.out} "
            f"({st.bytes_out} bytes, {st.mb_per_s:.1f} MB/s)"
        )
        counts = {
            "classes": st.classes,
            "splits": st.splits,
            "skipped": {
                "filtered": st.filtered,
                "unlabelled": st.unlabelled,
                "dropped": st.dropped,
                "unsafe": st.unsafe,
                "corrupt": st.corrupt,
                "missing_windows": st.missing_windows,
                "duplicate_windows": st.duplicate_windows,
                "refused_windows": len(st.refused),
            },
            "relabelled": st.relabelled,
            "relabels_unused": st.relabels_unused,
        }
        notes = "".join(f"\n{note}" for note in st.notes)
        return head + "\n" + json.dumps(counts, sort_keys=True) + notes


@dataclass(frozen=True)
class Selection:
    """The parsed selection options of an export."""

    filters: list[ItemFilter]
    split: tuple[float, ...] | None
    relabels: Relabels | None
    max_bytes: int
    since: float | None
    until: float | None

    def describe(self, options: ExportOptions) -> dict[str, Any]:
        """How the selection was made, as the archive's ``manifest.json`` records it."""
        return {
            "filters": list(options.filters),
            "since": self.since,
            "until": self.until,
            "source": options.source,
            "relabels": options.labels.name if options.labels else None,
        }


def run_export(options: ExportOptions, progress: RunProgress | None = None) -> ExportSummary:
    """Build the training archive ``options.out`` from the retained windows selected.

    The folder and the options are checked before any work starts.
    """
    if not options.directory.is_dir():
        raise OptionError(f"{options.directory}: no such retention folder")
    sel = parse_selection(options)
    bar = progress if progress is not None else NoProgress()
    describe = sel.describe(options)
    bar.start(None)
    try:
        stats = export_trainset(
            options.directory,
            options.out,
            filters=sel.filters,
            since=sel.since,
            until=sel.until,
            source=options.source,
            relabels=sel.relabels,
            split=sel.split,
            level=options.level,
            max_bytes=sel.max_bytes,
            progress=bar.advance,
            describe=describe,
            on_phase=lambda phase, total: bar.restart(f"export: {phase}", total),
        )
    finally:
        bar.stop()
    return ExportSummary(stats, options.out)


def parse_selection(options: ExportOptions) -> Selection:
    """The parsed selection options, in the command's order; :class:`OptionError` if bad.

    The output name is checked first (a folder there, or a file above it, is refused),
    before any work starts.
    """
    try:
        check_level(output_format(options.out), options.level)
        check_out(options.out, "OUT")
        check_not_ring_file(options.out, options.directory, "OUT")
        filters = parse_filters(options.filters)
        split = parse_split(options.split) if options.split else None
        relabels = load_relabels(options.labels) if options.labels else None
        bound = parse_size(options.max_bytes)
    except (FilterError, ExportError, ValueError) as exc:
        raise OptionError(str(exc)) from exc
    since, until = parse_when(options.since, "--since"), parse_when(options.until, "--until")
    return Selection(filters, split, relabels, bound, since, until)


# Compression levels each format's writer takes (as ``--help`` gives them).
LEVELS = {"zip": (1, 9), "tar.zst": (1, 22)}


def check_level(fmt: str, level: int) -> None:
    """:class:`OptionError` when ``--level`` is outside what the format ``fmt`` takes.

    Checked before any window is read: a zstd level over 22 used to end the export, after
    all the reading, in a ``ValueError`` from the compressor.
    """
    low, high = LEVELS.get(fmt, (level, level))
    if not low <= level <= high:
        raise OptionError(f"--level {level}: {fmt} takes {low} to {high}")


__all__ = [
    "LEVELS",
    "check_level",
    "ExportOptions",
    "ExportSummary",
    "Selection",
    "parse_selection",
    "run_export",
]
