"""The agent's hold on its state folder: one agent per ``state_dir``.

:class:`StateLock` takes an exclusive ``flock`` on ``<state_dir>/agent.lock`` (the kernel
drops it when the process dies, so a crash never leaves a stale lock) and writes the pid
into it for the message a second agent gets: :class:`StateInUse`, which ``cdml-edge run``
turns into exit status 2 (systemd does not restart it in a loop), as it does a folder it
cannot create or write (:class:`StateUnusable`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from cdml_edge.errors import CdmlError

LOCK_NAME = "agent.lock"


class StateUnusable(CdmlError):
    """The state folder cannot be created or its lock file opened; names the folder."""


class StateInUse(StateUnusable):
    """Another agent holds the state folder; names the folder and that agent's pid."""

    def __init__(self, folder: Path, pid: str) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"{folder}: state folder in use by another cdml-edge agent ({who}); one agent "
            "per state_dir: stop it, or give this one its own state_dir"
        )
        self.folder = folder
        self.pid = pid


class StateLock:
    """An exclusive lock on ``folder`` (created if needed) until :meth:`close`."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StateUnusable(
                f"{self.folder}: cannot use the state folder: {exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise StateInUse(self.folder, pid) from None
        with contextlib.suppress(OSError):  # only for the message; a full disk is no reason
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def close(self) -> None:
        """Release the lock (close its file); a second call does nothing."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


__all__ = ["LOCK_NAME", "StateInUse", "StateLock", "StateUnusable"]
