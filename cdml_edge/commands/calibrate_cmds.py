"""``cdml-edge calibrate``: fit an anomaly model's threshold and write it into the configuration.

The threshold is fit on a folder of normal samples by :func:`cdml_edge.window.calibrate.calibrate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from cdml_edge.model.runner import ModelRunner
    from cdml_edge.window.calibrate import Calibration


def calibrate(
    folder: Path = typer.Argument(..., help="Folder of normal samples (files of the modality)."),
    config: Path = typer.Option(..., "--config", "-c", help="The YAML configuration file."),
    model: str = typer.Option(..., "--model", "-m", help="Name of the model (key of models)."),
    percentile: float = typer.Option(
        99.0,
        "--percentile",
        "-p",
        min=50.0,
        max=100.0,
        help="Share of normal samples that must pass (99: about 1 in 100 flagged).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the threshold, write nothing."),
) -> None:
    """Score FOLDER with models.MODEL and write the threshold into the configuration."""
    from cdml_edge.commands.exits import user_errors

    with user_errors("calibrate"):
        result, kept = calibrate_in_config(config, model, folder, percentile, write=not dry_run)
    typer.echo(result.line(model))
    if kept is not None:
        note = "" if kept else " (rewritten: its comments could not be kept)"
        typer.echo(f"written to {config}{note}")


def calibrate_in_config(
    config: Path, name: str, folder: Path, percentile: float = 99.0, write: bool = True
) -> tuple[Calibration, bool | None]:
    """Calibrate ``models.<name>`` of the configuration file on ``folder``.

    With ``write``, set its ``anomaly_threshold`` there. Returns the calibration and whether
    the file kept its comments (``None`` when not written).
    """
    import numpy as np

    from cdml_edge.config import ConfigError, load_config
    from cdml_edge.config.edit import set_model_key
    from cdml_edge.model.runner import ModelOverrides, ModelRunner
    from cdml_edge.window import calibrate as calibration
    from cdml_edge.window.examples import ExamplesError

    if folder.exists() and not folder.is_dir():
        raise ExamplesError(f"{folder}: not a folder (give the folder of normal samples)")
    cfg = load_config(config)
    mc = cfg.models.get(name)
    if mc is None:
        raise ConfigError(
            str(config),
            [(f"models.{name}", f"no such model (models: {', '.join(cfg.models) or 'none'})")],
        )
    runner = ModelRunner.load(mc.path, ModelOverrides.from_config(mc, name))
    runner.modality = str(mc.modality)
    with np.errstate(invalid="ignore"):  # an inf score: refused just below, not warned of
        result = calibration.calibrate(runner, folder, percentile)
    _check_finite(runner, folder, result)
    kept = set_model_key(config, name, "anomaly_threshold", result.threshold) if write else None
    return result, kept


def _check_finite(runner: ModelRunner, folder: Path, result: Calibration) -> None:
    """Refuse a calibration over scores that are not all finite, naming the samples.

    A ``nan`` threshold compares false with every score and an ``inf`` one is never
    passed: an appliance given either would flag nothing. Only on that path are the
    samples scored again, to name them.
    """
    import math

    import numpy as np

    from cdml_edge.window import calibrate as calibration
    from cdml_edge.window.examples import ExamplesError, example_files

    summary = (result.threshold, result.low, result.median, result.high)
    if all(math.isfinite(v) for v in summary):
        return
    files = example_files(folder, runner.modality)
    scores = calibration.anomaly_scores(runner, files)
    bad = [(f, s) for f, s in zip(files, scores.tolist(), strict=True) if not math.isfinite(s)]
    shown = ", ".join(f"{f.name} ({s})" for f, s in bad[:3]) + (", ..." if len(bad) > 3 else "")
    raise ExamplesError(
        f"{folder}: model {runner.name} gave a score that is not finite for {len(bad)} of "
        f"{int(np.size(scores))} samples ({shown}): no threshold written; check the model "
        "on these files with cdml-edge test"
    )


def register(app: typer.Typer) -> None:
    """Attach ``calibrate`` to the root app."""
    app.command("calibrate")(calibrate)
