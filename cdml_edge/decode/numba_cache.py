"""Where librosa's numba kernels are cached, so that their compilation is paid once.

librosa compiles numba kernels the first time it is imported (20-50 s on two x86 cores,
longer on a Pi). numba caches them next to librosa's sources when that folder is writable -
inside site-packages, which a read-only install (``ProtectSystem=strict``) does not allow,
and where the cache should not live anyway. :func:`configure` points ``NUMBA_CACHE_DIR`` at a
folder of ours before librosa is imported (:mod:`cdml_edge.decode.audio` calls it), in this
order:

1. ``NUMBA_CACHE_DIR`` when the environment sets it;
2. the folder given by the caller (the agent's state folder);
3. ``$STATE_DIRECTORY/numba`` (systemd's ``StateDirectory=``, e.g. ``/var/lib/cdml-edge``;
   its first entry when it lists several);
4. ``$XDG_CACHE_HOME/cdml-edge/numba``, by default ``~/.cache/cdml-edge/numba``.

A folder that cannot be written is replaced by one under the temporary folder: numba then
compiles on every start (librosa cannot be imported at all without a writable cache).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ENV = "NUMBA_CACHE_DIR"
_USER_DIR = os.environ.get(ENV) or None  # the environment's choice, read once
_configured: Path | None = None


def default_dir() -> Path:
    """The cache folder rules 3-4 give (see the module docstring)."""
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if state:
        return Path(state) / "numba"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "cdml-edge" / "numba"


def configure(folder: str | Path | None = None) -> Path:
    """Point numba's cache at a folder (created if missing) and return the folder in use.

    ``$NUMBA_CACHE_DIR``, else ``folder``, else :func:`default_dir`. Takes effect for
    kernels compiled afterwards, also when numba is already imported.
    """
    global _configured
    chosen = _USER_DIR or folder
    path = Path(chosen) if chosen is not None else default_dir()
    if path == _configured:
        return path
    if not _writable(path):  # librosa cannot even be imported without a writable cache
        path = Path(tempfile.gettempdir()) / f"cdml-edge-numba-{os.getuid()}"
        _writable(path)
    os.environ[ENV] = str(path)
    numba = sys.modules.get("numba")
    if numba is not None:
        numba.core.config.reload_config()
    _configured = path
    return path


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def is_warm(folder: str | Path) -> bool:
    """Whether ``folder`` holds compiled kernels already (numba's ``.nbi`` index files)."""
    try:
        return any(Path(folder).rglob("*.nbi"))
    except OSError:
        return False
