"""CPU weights for benchmark processes: what systemd's ``CPUWeight=`` does, by hand.

Two sibling control groups under the root of the CPU controller (cgroup v2's unified tree,
or v1's ``cpu`` hierarchy): the agent's with a chosen weight, the neighbours' with the
default 100, as two services would be under ``system.slice``. Needs root and a writable
controller; :func:`available` says whether this machine has one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

V2 = Path("/sys/fs/cgroup")
V1_CPU = Path("/sys/fs/cgroup/cpu")


def _root() -> tuple[Path, int] | None:
    """The CPU controller's root and its version, if it is writable here."""
    if "cpu" in _read(V2 / "cgroup.controllers").split() and os.access(V2, os.W_OK):
        return V2, 2
    if (V1_CPU / "cpu.shares").exists() and os.access(V1_CPU, os.W_OK):
        return V1_CPU, 1
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def available() -> bool:
    """Whether CPU weights can be set here."""
    return _root() is not None


class WeightedGroup:
    """A control group of one CPU weight (systemd's scale: 1-10000, default 100)."""

    def __init__(self, name: str, weight: int) -> None:
        found = _root()
        if found is None:
            raise OSError("no writable CPU controller (cgroup v2 'cpu' or v1 'cpu')")
        root, self.version = found
        if self.version == 2:
            (root / "cgroup.subtree_control").write_text("+cpu")
        self.path = root / f"{name}-{os.getpid()}"
        self.path.mkdir(exist_ok=True)
        if self.version == 2:
            (self.path / "cpu.weight").write_text(str(weight))
        else:  # v1 shares: 1024 is the default weight of 100
            (self.path / "cpu.shares").write_text(str(max(2, weight * 1024 // 100)))

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Move what is left back to the root and delete the group."""
        for pid in _read(self.path / "cgroup.procs").split():
            with contextlib.suppress(OSError):  # it ended meanwhile
                (self.path.parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()
