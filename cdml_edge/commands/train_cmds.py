"""``cdml-edge train`` and ``cdml-edge export-onnx`` (need the ``train`` extra).

torch is imported inside the commands, so the CLI still loads on an appliance
without PyTorch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

from cdml_edge.commands.exits import EXIT_USAGE, fail, user_errors
from cdml_edge.commands.progress import epoch_bar
from cdml_edge.modality import ModelModality

EXIT_INTERRUPTED = 130
"""Exit status of a ``train`` stopped by Ctrl-C (128 + SIGINT, as a shell reports it)."""


def _need_torch(command: str) -> None:
    if importlib.util.find_spec("torch") is None:
        fail(command, "this command needs PyTorch: pip install 'cdml-edge[train]'", EXIT_USAGE)


def train(
    data: str = typer.Option(..., "--data", help="Archive (ZIP, tar.zst, s3://) of class folders."),
    modality: ModelModality = typer.Option("image", "--modality", help="What the archive holds."),
    epochs: int = typer.Option(10, "--epochs", min=0, help="Epochs to train."),
    out: Path = typer.Option(..., "--out", help="Run folder: metrics.jsonl and checkpoints/."),
    val_data: str | None = typer.Option(
        None, "--val-data", help="Separate validation archive (default: 20 % split)."
    ),
    name: str | None = typer.Option(None, "--name", help="Model name stored in the spec."),
    image_size: int = typer.Option(
        32, "--image-size", min=16, help="Image input size (multiple of 16)."
    ),
    channels: int = typer.Option(3, "--channels", help="Image channels: 3 (RGB) or 1."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    lr: float = typer.Option(2e-3, "--lr"),
    normal_label: str | None = typer.Option(
        None, "--anomaly-normal", help="Class folder of normal data: train an anomaly model."
    ),
    seed: int = typer.Option(0, "--seed", min=0),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda[:N]."),
    keep_all: bool = typer.Option(
        False, "--keep-all", help="Keep every epoch's checkpoint (default: the last and the best)."
    ),
) -> None:
    """Train a model on an archive of class folders.

    One line per epoch on stderr (and a bar on a terminal); prints the checkpoint to
    export, the best one, then one final metrics line (JSON).
    """
    _need_torch("train")
    from cdml_edge.nn.recipes import train_from_archive

    _check_options(channels, device)
    _check_out(out)

    finished = {"epoch": 0}
    with (
        user_errors("train", usage=(ValueError, KeyError)),
        epoch_bar(epochs) as (on_step, on_epoch),
        _interrupted(out, epochs, finished),
    ):
        result = train_from_archive(
            data,
            modality,
            epochs,
            out,
            val_data=val_data,
            name=name,
            image_size=image_size,
            channels=channels,
            batch_size=batch_size,
            lr=lr,
            normal_label=normal_label,
            seed=seed,
            device=device,
            on_step=on_step,
            on_epoch=_counting(on_epoch, finished),
            keep_all=keep_all,
        )
    _report(result)


def _counting(
    on_epoch: Callable[[dict[str, Any]], None], finished: dict[str, int]
) -> Callable[[dict[str, Any]], None]:
    """``on_epoch`` that also notes the last finished epoch in ``finished``."""

    def counted(record: dict[str, Any]) -> None:
        finished["epoch"] = int(record["epoch"])
        on_epoch(record)

    return counted


@contextlib.contextmanager
def _interrupted(out: Path, epochs: int, finished: dict[str, int]) -> Iterator[None]:
    """Ctrl-C: one line saying which epoch stopped and what is kept, then exit 130.

    Checkpoints are written whole or not at all, so the finished epochs' are complete.
    """
    try:
        yield
    except KeyboardInterrupt:
        done = finished["epoch"]
        folder = out / "checkpoints"
        last = sorted(folder.glob(f"epoch-{done:04d}*.pt"), key=lambda p: p.stat().st_mtime)
        kept = (
            f"the checkpoints of the epochs it finished are in {folder}"
            + (f" (the last: {last[-1]})" if last else "")
            if done
            else "no checkpoint written"
        )
        fail(
            "train",
            f"interrupted in epoch {done + 1} of {epochs}: {kept}; nothing half-written is left",
            EXIT_INTERRUPTED,
        )


def _check_options(channels: int, device: str) -> None:
    """Refuse ``--channels`` other than 1 or 3 and a ``--device`` this machine lacks (exit 2).

    Before any data is read: torch would otherwise fail at the first tensor moved there.
    """
    from cdml_edge.nn.train import resolve_device

    if channels not in (1, 3):
        fail("train", f"--channels: 1 (grey) or 3 (RGB), got {channels}", EXIT_USAGE)
    try:
        resolve_device(device)
    except ValueError as exc:
        fail("train", f"--device {device}: {exc}; use --device auto or --device cpu", EXIT_USAGE)


def _check_out(out: Path) -> None:
    """Refuse an ``--out`` that is, or lies under, something other than a folder (exit 2).

    Before any data is read: it used to end the run in ``File exists``, exit 1.
    """
    for at in (out, *out.parents):
        try:
            is_dir = at.is_dir()
            exists = is_dir or at.exists()
        except OSError:  # cannot be looked at: the run's own error names it
            return
        if is_dir:
            return
        if exists:
            what = "a file, not a folder" if at == out else f"{at} is a file, not a folder"
            fail("train", f"--out {out}: {what} (the run folder to write)", EXIT_USAGE)


def _report(result: Any) -> None:
    """The checkpoint to export (and the best one), then the final metrics as JSON.

    Notes on the data (a class a split export's val/ lacks) go to stderr as warnings.
    """
    for note in result.notes:
        typer.echo(f"cdml-edge train: warning: {note}", err=True)
    final: dict[str, Any] = dict(result.history[-1]) if result.history else {"epoch": 0}
    final["checkpoint"] = str(result.checkpoint)
    final["params"] = result.trainer.model.num_parameters()
    if result.spec.anomaly_threshold is not None:
        final["anomaly_threshold"] = result.spec.anomaly_threshold
    typer.echo(
        f"{result.spec.task} checkpoint: {result.checkpoint}\n"
        f"  export it: cdml-edge export-onnx {result.checkpoint} {result.spec.name}.onnx"
    )
    best = result.trainer.best_checkpoint
    if result.scorer is None and best is not None and best != result.checkpoint:
        typer.echo(f"  best (lowest validation loss): {best}")
    if result.plots:
        typer.echo("  plots: " + ", ".join(str(p) for p in result.plots))
    typer.echo(json.dumps(final, sort_keys=True))


def export_onnx(
    checkpoint: Path = typer.Argument(
        ..., metavar="CHECKPOINT", help="Checkpoint written by cdml-edge train."
    ),
    out: Path = typer.Argument(..., metavar="OUT", help="Output .onnx file."),
    opset: int = typer.Option(17, "--opset", help="ONNX opset."),
    tolerance: float = typer.Option(1e-4, "--tolerance", help="Parity limit vs torch."),
) -> None:
    """Export a checkpoint to ONNX (metadata included) and check parity with torch."""
    _need_torch("export-onnx")
    from cdml_edge.nn.onnx_export import export_checkpoint

    with user_errors("export-onnx"):
        report = export_checkpoint(checkpoint, out, opset=opset, tolerance=tolerance)
    typer.echo(
        f"{report.path}: opset {report.opset}, outputs {report.outputs}, "
        f"{report.size_bytes} bytes, parity max abs diff {report.max_abs_diff:.3g}"
    )


def register(app: typer.Typer) -> None:
    """Attach ``train`` and ``export-onnx`` to the root app."""
    app.command("train")(train)
    app.command("export-onnx")(export_onnx)
