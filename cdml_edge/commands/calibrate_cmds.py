"""``cdml-edge calibrate``: fit an anomaly model's threshold on a folder of normal samples."""

from __future__ import annotations

from pathlib import Path

import typer


def calibrate(
    folder: Path = typer.Argument(..., help="Folder of normal samples (files of the modality)."),
    config: Path = typer.Option(..., "--config", "-c", help="The YAML configuration file."),
    model: str = typer.Option(..., "--model", "-m", help="Name of the model (key of models)."),
    percentile: float = typer.Option(
        99.0, "--percentile", "-p", min=50.0, max=100.0,
        help="Share of normal samples that must pass (99: about 1 in 100 flagged).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the threshold, write nothing."),
) -> None:
    """Score FOLDER with models.MODEL and write the threshold into the configuration."""
    from cdml_edge.commands.exits import user_errors
    from cdml_edge.window.calibrate import calibrate_config

    with user_errors("calibrate"):
        result, kept = calibrate_config(config, model, folder, percentile, write=not dry_run)
    typer.echo(result.line(model))
    if kept is not None:
        note = "" if kept else " (rewritten: its comments could not be kept)"
        typer.echo(f"written to {config}{note}")


def register(app: typer.Typer) -> None:
    """Attach ``calibrate`` to the root app."""
    app.command("calibrate")(calibrate)
