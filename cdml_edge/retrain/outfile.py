"""The file a replay or export writes: checked before the work, named when writing fails.

A long run should not end on an output it could have refused at once (a folder where the
file goes, a file where its folder goes), and a write that fails (a full disk) names the
file it was writing, not a temporary name or no name at all.
"""

from __future__ import annotations

from pathlib import Path

from cdml_edge.retrain.errors import OptionError


def check_out(path: Path, option: str) -> None:
    """:class:`OptionError` when ``path`` (given as ``option``) cannot be written as a file.

    That is when it is a folder, or when one of the folders above it is a file.
    """
    if path.is_dir():
        raise OptionError(f"{path}: a folder; {option} is the file to write")
    for parent in path.parents:
        if parent.is_dir():
            return
        if parent.exists() or parent.is_symlink():
            raise OptionError(f"{parent}: not a folder, so {path} cannot be written ({option})")


def cannot_write(path: Path, exc: OSError) -> str:
    """Why writing ``path`` failed, naming it (``exc``: the error of the write)."""
    return f"{path}: cannot write: {exc.strerror or exc}"


__all__ = ["cannot_write", "check_out"]
