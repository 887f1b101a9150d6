"""``cdml-edge replay`` and ``cdml-edge export``: the retraining loop on retained windows.

The work is :func:`cdml_edge.retrain.replay_job.run_replay` and
:func:`cdml_edge.retrain.export_job.run_export`; these commands map their errors to exit
codes (:mod:`cdml_edge.commands.exits`: 2 a usage problem, 1 the run failed) and print
their summaries.
"""

from __future__ import annotations

from pathlib import Path

import typer

from cdml_edge.commands.exits import user_errors
from cdml_edge.commands.progress import run_bar
from cdml_edge.retrain.errors import ExportError, ReplayError
from cdml_edge.retrain.export_job import ExportOptions, run_export
from cdml_edge.retrain.replay_job import DEFAULT_REPLAY_OUT, ReplayOptions, run_replay


def replay(
    directory: Path | None = typer.Argument(
        None,
        metavar="[DIR]",
        help="Retention folder (default: retention.dir of the configuration).",
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
) -> None:
    """Re-score retained windows (archive order, full speed) with the current pipeline."""
    options = ReplayOptions(config, directory, model, since, until, source, publish, out)
    with user_errors("replay", failed=(ReplayError,)):
        summary = run_replay(options, run_bar("replay", quiet))
    typer.echo(summary.line())


def export(
    directory: Path = typer.Argument(..., metavar="DIR", help="Retention folder."),
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
        "2GiB", "--max-bytes", help="Refuse selections larger than this (held in memory)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Build a training archive (class folders) from retained windows, with provenance."""
    options = ExportOptions(
        directory, out, filters, since, until, source, labels, split, level, max_bytes
    )
    with user_errors("export", failed=(ExportError,)):
        summary = run_export(options, run_bar("export", quiet))
    typer.echo(summary.text())


def register(app: typer.Typer) -> None:
    """Attach ``replay`` and ``export`` to the root app."""
    app.command("replay")(replay)
    app.command("export")(export)
