"""Progress bars of the commands (rich, on stderr); nothing here runs without a command."""

from __future__ import annotations

from typing import Any


class RunBar:
    """A :class:`~cdml_edge.retrain.progress.RunProgress` drawn as one rich bar on stderr."""

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
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._task: Any = None

    def start(self, total: int | None) -> None:
        self._task = self._progress.add_task(self.description, total=total)
        self._progress.start()

    def set_total(self, total: int) -> None:
        if self._task is not None:
            self._progress.update(self._task, total=total)

    def advance(self, n: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, n)

    def stop(self) -> None:
        self._progress.stop()


def run_bar(description: str, quiet: bool) -> RunBar | None:
    """A bar for a replay or export run, or None with ``--quiet``."""
    return None if quiet else RunBar(description)
