"""``cdml-edge replay|export --engine ray`` as one call: options in, a fleet job, a summary out.

The options are those of the local commands (:class:`~cdml_edge.retrain.replay_job.
ReplayOptions`, :class:`~cdml_edge.retrain.export_job.ExportOptions`), parsed by the same
functions; the input is a folder tree or an ``s3://`` prefix. Usage problems raise
:class:`~cdml_edge.retrain.errors.OptionError` (a missing ``ray`` extra included), a job
that cannot run :class:`~cdml_edge.retrain.errors.ReplayError` /
:class:`~cdml_edge.retrain.errors.ExportError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdml_edge.config import ConfigError, load_config
from cdml_edge.decode.limits import DecodeLimits
from cdml_edge.errors import CdmlError
from cdml_edge.retrain.errors import ExportError, OptionError, ReplayError
from cdml_edge.retrain.export_job import ExportOptions, ExportSummary, parse_selection, run_export
from cdml_edge.retrain.filters import parse_when
from cdml_edge.retrain.fleet.locations import S3Options
from cdml_edge.retrain.fleet.session import RaySettings, ray_session, require_ray
from cdml_edge.retrain.progress import RunProgress
from cdml_edge.retrain.replay_job import (
    ReplayOptions,
    ReplaySummary,
    configured_models,
    load_replay_runners,
    run_replay,
    segment_rows_of,
    source_models,
)

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.retrain.fleet.export import FleetExportSummary
    from cdml_edge.retrain.fleet.replay import FleetReplaySummary


@dataclass(frozen=True)
class EngineOptions:
    """Where a replay or export runs: ``local`` (this process) or ``ray``."""

    engine: str = "local"
    ray_address: str | None = None  # an existing cluster; default a local Ray
    quiet: bool = False

    def check(self, root: str | None) -> None:
        """:class:`OptionError` for a combination the chosen engine cannot run."""
        if self.engine not in ("local", "ray"):
            raise OptionError(f"--engine {self.engine!r}: choose local or ray")
        if self.engine == "local" and self.ray_address:
            raise OptionError("--ray-address needs --engine ray")
        if self.engine == "local" and root is not None and root.startswith("s3://"):
            raise OptionError(f"{root}: s3:// inputs need --engine ray")
        if self.engine == "ray":
            require_ray()


def run_fleet_replay(
    options: ReplayOptions, root: str | None, engine: EngineOptions
) -> FleetReplaySummary:
    """``cdml-edge replay --engine ray``: results as Parquet (``--out``, a folder)."""
    from cdml_edge.model.runner import InferenceError
    from cdml_edge.retrain.fleet.replay import DEFAULT_FLEET_REPLAY_OUT, fleet_replay
    from cdml_edge.retrain.fleet.scorer import ship_models

    if options.publish:
        raise OptionError("--publish works with --engine local only")
    require_ray()
    try:
        cfg = load_config(options.config)
    except ConfigError as exc:
        raise OptionError(str(exc)) from exc
    where = root or (str(cfg.retention.dir) if cfg.retention else None)
    if where is None:
        raise OptionError("no retention folder: give DIR or set retention.dir")
    since, until = parse_when(options.since, "--since"), parse_when(options.until, "--until")
    try:
        runners = load_replay_runners(cfg, options.models)
    except InferenceError as exc:
        raise ReplayError(str(exc)) from exc
    if not runners:
        raise OptionError("no model: configure models or give --model")
    models = ship_models(runners, configured_models(cfg), options.models)
    names = {m: f"{r.name}@{r.version}" for m, r in sorted(runners.items())}
    s3 = S3Options(cfg.s3.endpoint, cfg.s3.region) if cfg.s3 else S3Options.from_env()
    out = options.out or DEFAULT_FLEET_REPLAY_OUT
    try:
        with ray_session(RaySettings(engine.ray_address), quiet=engine.quiet):
            return fleet_replay(
                where,
                models,
                names,
                out,
                since=since,
                until=until,
                source=options.source,
                segment_rows=segment_rows_of(cfg),
                s3=s3,
                source_models=source_models(cfg, runners),
                limits=DecodeLimits.of(cfg.limits),
            )
    except OptionError:
        raise
    except CdmlError as exc:
        raise ReplayError(str(exc)) from exc
    except Exception as exc:
        raise ReplayError(ray_failure(exc)) from exc


def run_fleet_export(
    options: ExportOptions, root: str, engine: EngineOptions
) -> FleetExportSummary:
    """``cdml-edge export --engine ray``: ``--max-bytes`` bounds each shard."""
    from cdml_edge.retrain.fleet.export import fleet_export

    require_ray()
    sel = parse_selection(options)
    try:
        with ray_session(RaySettings(engine.ray_address), quiet=engine.quiet):
            return fleet_export(
                root,
                options.out,
                sel,
                source=options.source,
                level=options.level,
                describe=sel.describe(options),
                s3=S3Options.from_env(),
            )
    except (OptionError, ExportError):
        raise
    except CdmlError as exc:
        raise ExportError(str(exc)) from exc
    except Exception as exc:
        raise ExportError(ray_failure(exc)) from exc


def ray_failure(exc: BaseException) -> str:
    """A job Ray could not finish, in one line; anything else is raised as it is.

    Could not finish: a task failed past its retries (a full disk, a worker killed for
    memory).
    """
    from ray.exceptions import RayError

    if not isinstance(exc, RayError):
        raise exc
    cause = getattr(exc, "cause", None) or exc
    first = str(cause).strip().splitlines()
    return f"the Ray job failed: {type(cause).__name__}: {first[-1] if first else ''}"


def replay_on(
    engine: EngineOptions,
    options: ReplayOptions,
    root: str | None,
    progress: RunProgress | None = None,
) -> ReplaySummary | FleetReplaySummary:
    """``cdml-edge replay`` on the chosen engine (``root``: DIR as given, ``s3://`` too)."""
    engine.check(root)
    if engine.engine == "ray":
        return run_fleet_replay(options, root, engine)
    return run_replay(options, progress)


def export_on(
    engine: EngineOptions,
    options: ExportOptions,
    root: str,
    progress: RunProgress | None = None,
) -> ExportSummary | FleetExportSummary:
    """``cdml-edge export`` on the chosen engine (``root``: DIR as given, ``s3://`` too)."""
    engine.check(root)
    if engine.engine == "ray":
        return run_fleet_export(options, root, engine)
    return run_export(options, progress)


__all__ = [
    "EngineOptions",
    "export_on",
    "replay_on",
    "run_fleet_export",
    "run_fleet_replay",
]
