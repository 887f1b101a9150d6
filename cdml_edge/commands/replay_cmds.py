"""``cdml-edge replay`` and ``cdml-edge export``: the retraining loop on retained windows.

The work is :func:`cdml_edge.retrain.replay_job.run_replay` and
:func:`cdml_edge.retrain.export_job.run_export`; these commands map their errors to exit
codes (:mod:`cdml_edge.commands.exits`: 2 a usage problem, 1 the run failed, or replay
skipped a corrupt window or could not deliver what it published) and print their summaries.
"""

from __future__ import annotations

from pathlib import Path

import typer

from cdml_edge import charts
from cdml_edge.commands.exits import EXIT_FAILED, user_errors
from cdml_edge.commands.progress import run_bar
from cdml_edge.retrain.errors import ExportError, ReplayError
from cdml_edge.retrain.export_job import ExportOptions
from cdml_edge.retrain.fleet.jobs import EngineOptions, export_on, replay_on
from cdml_edge.retrain.replay_job import DEFAULT_REPLAY_OUT, ReplayOptions

ENGINE_HELP = "local (this process) or ray (Ray Data; pip install 'cdml-edge[ray]')."
ADDRESS_HELP = "With --engine ray: an existing Ray cluster (default: a local Ray)."


def replay(
    directory: str | None = typer.Argument(
        None,
        metavar="DIR",
        help="Retention folder (default: retention.dir of the configuration); with --engine "
        "ray a folder tree or s3:// prefix of many.",
    ),
    config: Path = typer.Option(..., "--config", "-c", help="The YAML configuration file."),
    model: list[Path] = typer.Option(
        [], "--model", help="A new .onnx model; replaces the configured one of its modality."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Windows closed at or after: ISO time, unix seconds or age (7d)."
    ),
    until: str | None = typer.Option(None, "--until", help="Windows closed before this time."),
    source: str | None = typer.Option(None, "--source", help="Only this source."),
    publish: bool = typer.Option(
        False, "--publish", help="Publish results on {prefix}/{device}/replay/{source}/..."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help=f"Results as JSON lines (default without --publish: {DEFAULT_REPLAY_OUT}).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    engine: str = typer.Option("local", "--engine", help=ENGINE_HELP),
    ray_address: str | None = typer.Option(None, "--ray-address", help=ADDRESS_HELP),
) -> None:
    """Re-score retained windows (archive order, full speed) with the current pipeline."""
    folder = Path(directory) if directory else None
    options = ReplayOptions(config, folder, model, since, until, source, publish, out)
    with user_errors("replay", failed=(ReplayError,)):
        summary = replay_on(
            EngineOptions(engine, ray_address, quiet),
            options,
            directory,
            run_bar("replay", quiet),
        )
    typer.echo(summary.line())
    picture = getattr(summary, "comparison", None)  # the local engine draws one
    if picture is not None:
        typer.echo(f"before/after: {picture}")
    elif out is not None and engine == "local" and not charts.available():
        typer.echo(
            "before/after: not drawn, matplotlib is not installed (pip install 'cdml-edge[plots]')"
        )
    if not summary.complete:
        for line in summary.stats.errors:
            typer.echo(line, err=True)
        raise typer.Exit(EXIT_FAILED)


def export(
    directory: str = typer.Argument(
        ...,
        metavar="DIR",
        help="Retention folder; with --engine ray a folder tree or s3:// prefix of many.",
    ),
    out: Path = typer.Argument(
        ..., metavar="OUT", help="Training archive to write (.zip or .tar.zst)."
    ),
    filters: list[str] = typer.Option(
        [], "--filter", help="FIELD OP VALUE, e.g. 'label=defect', 'anomaly>0.8' (all must hold)."
    ),
    since: str | None = typer.Option(None, "--since", help="Windows closed at or after."),
    until: str | None = typer.Option(None, "--until", help="Windows closed before."),
    source: str | None = typer.Option(None, "--source", help="Only this source."),
    labels: Path | None = typer.Option(
        None, "--labels", help="Relabel CSV (label + id, or window_id + name, or name)."
    ),
    split: str | None = typer.Option(
        None, "--split", help="train/val[/test] fractions, e.g. 0.8/0.1/0.1."
    ),
    level: int = typer.Option(3, "--level", help="Compression level (zip 1-9, zstd 1-22)."),
    max_bytes: str = typer.Option(
        "2GiB",
        "--max-bytes",
        help="Refuse selections larger than this (held in memory); with --engine ray, "
        "the bound of one shard (a larger selection is written as several).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    engine: str = typer.Option("local", "--engine", help=ENGINE_HELP),
    ray_address: str | None = typer.Option(None, "--ray-address", help=ADDRESS_HELP),
) -> None:
    """Build a training archive (class folders) from retained windows, with provenance."""
    options = ExportOptions(
        Path(directory), out, filters, since, until, source, labels, split, level, max_bytes
    )
    with user_errors("export", failed=(ExportError,)):
        summary = export_on(
            EngineOptions(engine, ray_address, quiet),
            options,
            directory,
            run_bar("export", quiet),
        )
    typer.echo(summary.text())
    if split and Path(out).is_file():
        from cdml_edge.data.splits import archive_split_gaps

        for gap in archive_split_gaps(out):  # a small export can leave a class out of a split
            typer.echo(f"cdml-edge export: warning: {gap.message()}", err=True)
    refused = getattr(getattr(summary, "stats", None), "refused", None) or []
    if refused:  # windows skipped (local engine): each named, and the run failed
        for line in refused:
            typer.echo(line, err=True)
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Attach ``replay`` and ``export`` to the root app."""
    app.command("replay")(replay)
    app.command("export")(export)
