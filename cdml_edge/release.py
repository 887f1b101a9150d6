"""Which release this process runs, and whether its venv holds what the lock pins.

``scripts/release/install.sh`` installs each release into its own venv and leaves two files there:
``cdml-edge.lock`` (the hash-checked lock it installed from) and ``cdml-edge-release.json``
(``{"release": ..., "lock": ..., "replaced": [...]}``; ``replaced`` names packages swapped on
purpose, such as ``onnxruntime`` for NVIDIA's ``onnxruntime-gpu`` on a Jetson). Outside such a
venv (a development checkout, a plain ``pip install``) the release is ``None`` and the lock
state is ``"none"``.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from cdml_edge import __version__

LOCK_FILE = "cdml-edge.lock"
RELEASE_FILE = "cdml-edge-release.json"
# Installed by venv itself or the project's own distribution: never in the lock.
_NOT_LOCKED = {"pip", "setuptools", "wheel", "cdml-edge"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Release:
    """The running release: version, release name, lock file and what differs from it."""

    version: str
    release: str | None = None
    lock: str | None = None
    differences: tuple[str, ...] = field(default=())

    @property
    def lock_state(self) -> str:
        """``match``, ``differs`` or ``none`` (no lock beside this venv)."""
        if self.lock is None:
            return "none"
        return "differs" if self.differences else "match"

    def describe(self) -> str:
        """One line for the doctor."""
        rel = f"release {self.release}" if self.release else "not an installed release"
        if self.lock is None:
            return f"cdml-edge {self.version}, {rel}, no lock"
        if not self.differences:
            return f"cdml-edge {self.version}, {rel}, packages match {self.lock}"
        shown = ", ".join(self.differences[:6]) + (" ..." if len(self.differences) > 6 else "")
        return f"cdml-edge {self.version}, {rel}, differs from {self.lock}: {shown}"


def read_pins(text: str) -> dict[str, str]:
    """The ``name==version`` pins of a requirements/lock text, by canonical name."""
    return {_canon(m[1]): m[2] for m in map(_PIN.match, text.splitlines()) if m}


def compare(pins: dict[str, str], installed: dict[str, str], replaced: set[str]) -> list[str]:
    """What differs between the lock's ``pins`` and the ``installed`` versions."""
    out = []
    for name, want in sorted(pins.items()):
        if name in replaced:
            continue
        have = installed.get(name)
        if have is None:
            out.append(f"{name} missing")
        elif have != want:
            out.append(f"{name} {have} (lock {want})")
    extra = set(installed) - set(pins) - _NOT_LOCKED - replaced
    out += [f"{name} not in the lock" for name in sorted(extra)]
    return out


def _installed() -> dict[str, str]:
    return {
        _canon(d.metadata["Name"]): d.version
        for d in metadata.distributions()
        if d.metadata["Name"]
    }


def inspect(prefix: Path) -> Release:
    """The release of the venv at ``prefix``."""
    try:
        info = json.loads((prefix / RELEASE_FILE).read_text())
    except (OSError, ValueError):
        info = {}
    lock_path = prefix / LOCK_FILE
    if not lock_path.is_file():
        return Release(__version__, info.get("release"))
    replaced = {_canon(n) for n in info.get("replaced", [])}
    diffs = compare(read_pins(lock_path.read_text()), _installed(), replaced)
    return Release(__version__, info.get("release"), info.get("lock", LOCK_FILE), tuple(diffs))


@functools.lru_cache(maxsize=1)
def current() -> Release:
    """The release of this process's venv (computed once)."""
    return inspect(Path(sys.prefix))
