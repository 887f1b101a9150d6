"""How a replay or export run reports progress to whoever shows it (the CLI's bar)."""

from __future__ import annotations

from typing import Protocol


class RunProgress(Protocol):
    """Progress of one run, in items (replay), or windows then bytes (export's two passes)."""

    def start(self, total: int | None) -> None:
        """The run begins; ``total`` may be unknown (None) until :meth:`set_total`."""

    def set_total(self, total: int) -> None:
        """The total became known."""

    def advance(self, n: int) -> None:
        """``n`` more units are done."""

    def restart(self, description: str, total: int | None) -> None:
        """A new phase of the run: back to 0 of ``total`` units, shown as ``description``."""

    def stop(self) -> None:
        """The run ended (also on failure)."""


class NoProgress:
    """A :class:`RunProgress` that shows nothing."""

    def start(self, total: int | None) -> None:
        """Do nothing."""

    def set_total(self, total: int) -> None:
        """Do nothing."""

    def advance(self, n: int) -> None:
        """Do nothing."""

    def restart(self, description: str, total: int | None) -> None:
        """Do nothing."""

    def stop(self) -> None:
        """Do nothing."""


__all__ = ["NoProgress", "RunProgress"]
