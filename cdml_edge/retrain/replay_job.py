"""``cdml-edge replay`` as one call: options in, the windows re-scored, a summary out.

:func:`run_replay` reads the configuration, lists the retained windows, loads the models
(a ``--model`` file replaces the configured model of its modality), then replays into a
JSON-lines file and/or publishes on ``{prefix}/{device}/replay/{source}/...`` through the
configured output. Usage problems raise :class:`OptionError`, unreadable windows or models
:class:`ReplayError`; what happened comes back as a :class:`ReplaySummary`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cdml_edge.config import ConfigError, load_config
from cdml_edge.decode.limits import DecodeLimits, set_limits
from cdml_edge.fsio.kinds import kind_of
from cdml_edge.retrain.compare import Comparison, comparison_path
from cdml_edge.retrain.errors import OptionError, ReplayError
from cdml_edge.retrain.filters import parse_when
from cdml_edge.retrain.held import ring_contents, unknown_source
from cdml_edge.retrain.outfile import cannot_write, check_not_ring_file, check_out
from cdml_edge.retrain.progress import NoProgress, RunProgress
from cdml_edge.retrain.replay import ReplayedWindow, ReplayStats, iter_replay, replay_to_jsonl
from cdml_edge.store.catalog import WindowRecord
from cdml_edge.store.sidecar import RetentionError, scan_retained
from cdml_edge.units import counted

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import AppConfig
    from cdml_edge.model.runner import ModelOverrides, ModelRunner
    from cdml_edge.outputs.base import Output

DEFAULT_REPLAY_OUT = "replay-results.jsonl"


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay: the command-line options of ``cdml-edge replay``."""

    config: Path
    directory: Path | None = None  # default: retention.dir of the configuration
    models: Sequence[Path] = ()
    since: str | None = None  # ISO time, unix seconds or an age (7d)
    until: str | None = None
    source: str | None = None
    publish: bool = False
    out: Path | None = None  # default without publish: DEFAULT_REPLAY_OUT


@dataclass(frozen=True)
class ReplaySummary:
    """What a replay run did, and where its results went.

    ``undelivered``: published messages still in the replay spool when the run ended (the
    broker was away); the next ``replay --publish`` sends them.
    """

    stats: ReplayStats
    out: Path | None
    unmatched: list[str] = field(default_factory=list)  # --model files that scored nothing
    undelivered: int = 0
    spool: Path | None = None
    comparison: Path | None = None  # the before/after picture beside ``out``

    @property
    def complete(self) -> bool:
        """Every window was read and every message delivered (the exit status is 0)."""
        st = self.stats
        return st.corrupt == 0 and st.skipped == 0 and self.undelivered == 0

    def line(self) -> str:
        """The summary the command prints: one line, then one per missing or duplicate window.

        Those windows do not fail the run (exit 0), so they are named here, not among the
        errors the command prints when the run fails.
        """
        st = self.stats
        where = f" -> {self.out}" if self.out is not None else ""
        first = f", {st.first_verdicts} first verdicts" if st.first_verdicts else ""
        twice = f", {st.duplicates} duplicate windows skipped" if st.duplicates else ""
        unused = "".join(
            f"; --model {m} matched no item (the windows hold {_held(st)})" for m in self.unmatched
        )
        left = (
            f"; {self.undelivered} messages not delivered, left in {self.spool}"
            if self.undelivered
            else ""
        )
        return (
            f"replayed {counted(st.windows, 'window')}, {counted(st.items, 'result')} "
            f"({st.items_per_s:.0f} items/s), "
            f"{st.changed_labels} labels and {st.changed_anomalies} anomaly flags changed{first}, "
            f"{st.failures} failed, {st.missing} missing, {st.corrupt} corrupt windows "
            f"skipped, {st.skipped} refused (pointing outside the ring, links, special "
            f"files){twice}{where}{unused}{left}"
        ) + "".join(f"\n{note}" for note in st.notes)


def _held(st: ReplayStats) -> str:
    """The modalities replayed, e.g. ``image`` or ``csv, image``; ``no item`` when none."""
    return ", ".join(sorted(st.by_modality)) or "no item"


@dataclass(frozen=True)
class _ReplayPlan:
    cfg: AppConfig
    ring: Path
    records: list[WindowRecord]
    runners: dict[str, ModelRunner]
    out: Path | None
    skipped: list[tuple[str, str]]  # what the listing refused: (sidecar or window, reason)
    notes: list[str] = field(default_factory=list)  # a selection that matched no window


def _started_output(cfg: AppConfig) -> Output:
    """The configuration's output, started, for publishing replayed results."""
    from cdml_edge.outputs.factory import make_output

    output = make_output(cfg, replay=True)
    output.start()
    return output


def run_replay(options: ReplayOptions, progress: RunProgress | None = None) -> ReplaySummary:
    """Re-score the retained windows ``options`` select (archive order, full speed)."""
    plan = _plan(options)
    bar = progress if progress is not None else NoProgress()
    output = _started_output(plan.cfg) if options.publish else None
    compare = Comparison()
    results = plan.cfg.results_mode()

    def on_window(win: ReplayedWindow) -> None:
        if output is not None:
            output.publish_batch(win.messages(results))
        for doc in win.records:
            compare.add(doc)
        bar.advance(win.record.n_items)

    rows = segment_rows_of(plan.cfg)
    uses = source_models(plan.cfg, plan.runners)
    try:
        bar.start(sum(r.n_items for r in plan.records))
        if plan.out is not None:
            st = replay_to_jsonl(
                plan.ring,
                plan.runners,
                plan.out,
                segment_rows=rows,
                on_window=on_window,
                records=plan.records,
                models=uses,
            )
        else:
            st = ReplayStats()
            for win in iter_replay(
                plan.ring,
                plan.runners,
                segment_rows=rows,
                stats=st,
                records=plan.records,
                models=uses,
            ):
                on_window(win)
    finally:
        bar.stop()
        if output is not None:
            output.stop(timeout=30.0)
    for what, reason in plan.skipped:
        st.skip(what, reason)
    st.notes.extend(plan.notes)
    given = {str(p) for p in options.models}
    unmatched = [
        f"{r.path} ({r.modality})"
        for _name, r in sorted(plan.runners.items())
        if str(r.path) in given and not st.by_modality.get(r.modality)
    ]
    picture = _picture(compare, plan.out) if plan.out is not None else None
    if output is None:
        return ReplaySummary(st, plan.out, unmatched, comparison=picture)
    left = output.stats().get("spool_records", 0)
    spool = plan.cfg.spool.dir / "replay" if left else None
    return ReplaySummary(st, plan.out, unmatched, left, spool, picture)


def _picture(compare: Comparison, out: Path) -> Path | None:
    """The before/after picture beside ``out``; :class:`ReplayError` names it if unwritable."""
    path = comparison_path(out)
    try:
        return compare.write(path)
    except OSError as exc:  # a full disk: the results file is written, the picture is not
        raise ReplayError(f"{cannot_write(path, exc)} (the results are in {out})") from exc


def _plan(options: ReplayOptions) -> _ReplayPlan:
    """The configuration, windows and models of a run, checked in the command's order."""
    from cdml_edge.model.runner import InferenceError

    try:
        cfg = load_config(options.config)
    except ConfigError as exc:
        raise OptionError(str(exc)) from exc
    set_limits(DecodeLimits.of(cfg.limits))  # windows are decoded as the agent decodes them
    ring = options.directory or (cfg.retention.dir if cfg.retention else None)
    if ring is None:
        raise OptionError("no retention folder: give DIR or set retention.dir")
    if not Path(ring).is_dir():  # what the user named is missing: a usage error
        raise OptionError(f"{ring}: no such retention folder")
    for model in options.models:
        check_model_file(model)
    since, until = parse_when(options.since, "--since"), parse_when(options.until, "--until")
    try:
        listing = scan_retained(ring, since, until, options.source)
    except RetentionError as exc:
        raise ReplayError(str(exc)) from exc
    notes = [] if listing.records else [_nothing_selected(options, Path(ring))]
    try:
        runners = load_replay_runners(cfg, options.models)
    except InferenceError as exc:
        raise ReplayError(str(exc)) from exc
    if not runners:
        raise OptionError("no model: configure models or give --model")
    out = options.out
    if out is None and not options.publish:
        out = Path(DEFAULT_REPLAY_OUT)
    if out is not None:
        check_out(out, "--out")
        check_not_ring_file(out, Path(ring), "--out")
    return _ReplayPlan(cfg, Path(ring), listing.records, runners, out, listing.skipped, notes)


def check_model_file(model: Path) -> None:
    """:class:`OptionError` unless ``model`` (a ``--model``) is a regular file.

    A device, FIFO or folder is named as what it is: it used to be "no such model file".
    """
    try:
        mode = os.stat(model).st_mode
    except FileNotFoundError:
        raise OptionError(f"{model}: no such model file (--model)") from None
    except OSError as exc:
        raise OptionError(f"{model}: {exc.strerror or exc} (--model)") from exc
    if not stat.S_ISREG(mode):
        raise OptionError(f"{model}: not a regular file ({kind_of(mode)}) (--model)")


def _nothing_selected(options: ReplayOptions, ring: Path) -> str:
    """The note for a selection that matched no window, naming what the ring holds.

    :class:`ReplayError` when ``--source`` names a source the ring holds no window of (a
    typo): as ``export``, whose "nothing to export" exits 1. A time range with no window
    (a quiet day for the nightly ``--since 1d``) is said, and the run succeeds.
    """
    held = ring_contents(ring)
    typo = unknown_source(options.source, held)
    if typo is not None:
        raise ReplayError(f"{typo}; nothing replayed")
    given = [
        f"{flag} {value}"
        for flag, value in (
            ("--source", options.source),
            ("--since", options.since),
            ("--until", options.until),
        )
        if value is not None
    ]
    if not given:
        return f"{ring}: no window to replay ({held.describe()})"
    return f"no window matches {' '.join(given)} ({held.describe()})"


def load_replay_runners(
    cfg: AppConfig, models: Sequence[str | Path] = (), warm_up: bool = False
) -> dict[str, ModelRunner]:
    """The configured models (with their overrides and inference settings), and ``models``.

    Each ``--model`` file replaces the configured model of its modality, under that
    model's name (see :func:`replaced_name`), so the sources it scores use the new file.
    """
    from cdml_edge.model.runner import ModelRunner, load_runners
    from cdml_edge.window.examples import fit_examples

    spec = configured_models(cfg)
    extra: dict[str, ModelRunner] = {}
    for p in models:
        probe = ModelRunner.load(p)
        name = replaced_name(cfg, probe.spec.modality, p)
        extra[name] = _load_extra(cfg, name, p, probe)
        spec.pop(name, None)
    runners = load_runners(spec, warm_up=warm_up)
    for name, r in extra.items():
        if warm_up:
            r.warm_up()
        runners[name] = r
    fit_examples(runners)
    return runners


def replaced_name(cfg: AppConfig, modality: str, path: str | Path) -> str:
    """The name of the configured model a ``--model`` file of ``modality`` replaces.

    The model named by the modality itself (``models.image``), else the one configured model
    of that modality (``models.defects`` with ``modality: image``), else the modality (a
    model added). :class:`OptionError` when several models of that modality, none named by
    it, could be meant.
    """
    if modality in cfg.models:
        return modality
    same = [k for k, mc in cfg.models.items() if mc.modality == modality]
    if len(same) > 1:
        raise OptionError(
            f"--model {path} ({modality}): the configuration has {len(same)} {modality} models "
            f"({', '.join(same)}); point the one to replace at the new file in a copy of the "
            "configuration instead"
        )
    return same[0] if same else modality


def configured_models(cfg: AppConfig) -> dict[str, tuple[str | Path, ModelOverrides]]:
    """``{name: (model file, the configuration's description and inference settings)}``."""
    from cdml_edge.model.runner import ModelOverrides

    return {key: (mc.path, ModelOverrides.from_config(mc, key)) for key, mc in cfg.models.items()}


def _load_extra(cfg: AppConfig, name: str, path: str | Path, runner: ModelRunner) -> ModelRunner:
    """A ``--model`` file (``runner``, loaded once): its own metadata (no overrides).

    It runs with the inference settings configured for the model ``name`` it replaces.
    """
    from cdml_edge.model.runner import ModelOverrides, ModelRunner

    mc = cfg.models.get(name)
    settings = ModelOverrides.from_config(mc).settings if mc is not None else runner.settings
    return (
        runner
        if settings == runner.settings
        else ModelRunner.load(path, ModelOverrides(settings=settings))
    )


def source_models(cfg: AppConfig, runners: Mapping[str, object]) -> dict[str, list[str]]:
    """Per configured source, the names of the loaded models that score it, in its order."""
    return {
        s.name: names
        for s in cfg.sources
        if (names := [n for n in cfg.models_of(s) if n in runners])
    }


def segment_rows_of(cfg: AppConfig) -> dict[str, int | None]:
    """Per-source ``segment_rows`` from the configuration."""
    return {s.name: s.segment_rows for s in cfg.sources}


__all__ = [
    "DEFAULT_REPLAY_OUT",
    "ReplayOptions",
    "ReplaySummary",
    "configured_models",
    "load_replay_runners",
    "replaced_name",
    "run_replay",
    "segment_rows_of",
    "source_models",
]
