"""Progress bars of the commands (rich, on stderr, so stdout holds only results).

Nothing here runs without a command.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


class RunBar:
    """A :class:`~cdml_edge.retrain.progress.RunProgress` drawn as one rich bar on stderr.

    Drawn on a terminal only: into a file or a pipe nothing is drawn.
    """

    def __init__(self, description: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.description = description
        console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal,  # a log or a pipe gets the summary line only
        )
        self._task: Any = None

    def start(self, total: int | None) -> None:
        """Add the bar (``total`` None: not known yet) and start drawing it."""
        self._task = self._progress.add_task(self.description, total=total)
        self._progress.start()

    def set_total(self, total: int) -> None:
        """Set the bar's total, once known."""
        if self._task is not None:
            self._progress.update(self._task, total=total)

    def advance(self, n: int) -> None:
        """Advance the bar by ``n`` units."""
        if self._task is not None:
            self._progress.advance(self._task, n)

    def restart(self, description: str, total: int | None) -> None:
        """Start the bar again at 0 of ``total`` for a new phase, shown as ``description``."""
        if self._task is not None:
            self._progress.reset(self._task, total=total, description=description)

    def stop(self) -> None:
        """Stop drawing; the bar stays on screen."""
        self._progress.stop()


def _stderr() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def run_bar(description: str, quiet: bool) -> RunBar | None:
    """A bar for a replay or export run, or None with ``--quiet``."""
    return None if quiet else RunBar(description)


def epoch_line(record: dict[str, Any], epochs: int) -> str:
    """One epoch of ``cdml-edge train`` as a line: losses, accuracies, seconds."""
    parts = [
        f"{key} {record[key]:.4g}"
        for key in ("train_loss", "train_acc", "val_loss", "val_acc")
        if key in record
    ]
    return f"epoch {record['epoch']}/{epochs}: " + ", ".join(parts) + f", {record['seconds']:.1f} s"


StepAndEpoch = tuple[Callable[[int, int, float], None], Callable[[dict[str, Any]], None]]


@contextlib.contextmanager
def epoch_bar(epochs: int) -> Iterator[StepAndEpoch]:
    """Progress of ``cdml-edge train`` on stderr: a line per epoch, and a bar on a terminal.

    Yields the trainer's ``on_step(epoch, step, loss)`` and ``on_epoch(record)``. The bar
    (steps of the current epoch and the loss) is transient and drawn on a terminal only;
    steps per epoch are known after the first epoch, so it restarts with that total at
    each new epoch. The epoch lines go to a log or a pipe as well.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = _stderr()
    with Progress(
        TextColumn("epoch {task.fields[epoch]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # nothing to erase: not even a blank line in a log
    ) as progress:
        task = progress.add_task("train", total=None, epoch=f"1/{epochs}", loss=float("nan"))
        state: dict[str, int] = {"epoch": 0, "steps": 0}

        def on_step(epoch: int, step: int, loss: float) -> None:
            if epoch != state["epoch"]:  # steps per epoch are known after the first one
                progress.reset(task, total=state["steps"] or None)
                state["epoch"] = epoch
            state["steps"] = max(state["steps"], step + 1)
            progress.update(task, completed=step + 1, epoch=f"{epoch}/{epochs}", loss=loss)

        def on_epoch(record: dict[str, Any]) -> None:
            if console.is_terminal:
                progress.console.print(epoch_line(record, epochs), highlight=False)
            else:
                sys.stderr.write(epoch_line(record, epochs) + "\n")
                sys.stderr.flush()

        yield on_step, on_epoch


@contextlib.contextmanager
def bytes_bar(total: int) -> Iterator[Callable[[int], None]]:
    """A bar for ``cdml-edge pack`` (on a terminal): bytes read so far.

    Yields ``advance(nbytes)``.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    console = _stderr()
    columns = (TextColumn("packing"), BarColumn(), DownloadColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("pack", total=total)
        yield lambda n: progress.advance(task, n)
