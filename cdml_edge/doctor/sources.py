"""The configured sources: folders readable (writable for ``on_done``), cameras reachable."""

from __future__ import annotations

import os

from cdml_edge.config import SourceConfig
from cdml_edge.doctor.access import Account, R, W, X
from cdml_edge.doctor.cameras import check_camera
from cdml_edge.doctor.check import DEFAULT_TIMEOUT_S, Check, guard
from cdml_edge.doctor.folders import dir_problem


def check_source(
    src: SourceConfig, timeout_s: float = DEFAULT_TIMEOUT_S, account: Account | None = None
) -> Check:
    """One source's check: a folder readable (writable for ``on_done``), a camera reachable.

    A check that raises is a failed check naming the exception.
    """
    name = f"source {src.name}"
    if src.kind == "camera":
        return guard(name, lambda: check_camera(name, src, timeout_s, account))
    return guard(name, lambda: _check_folder(name, src, account))


def _check_folder(name: str, src: SourceConfig, account: Account | None = None) -> Check:
    path = src.path
    assert path is not None  # the config requires it for folder sources
    if not path.exists():
        return Check(name, False, f"{path} does not exist")
    if not path.is_dir():
        return Check(name, False, f"{path} is not a folder")
    try:
        with os.scandir(path) as it:
            n = sum(1 for _ in it)
    except OSError as exc:
        return Check(name, False, f"{path} cannot be listed: {exc.strerror or exc}")
    if account is not None:
        problem = account.dir_problem(path, R | X)
        if problem:
            return Check(name, False, problem)
    if src.on_done in ("delete", "move"):
        if account is not None:
            problem = account.dir_problem(path, W | X)
        elif not os.access(path, os.W_OK | os.X_OK):
            problem = f"{path} is not writable"
        else:
            problem = None
        if problem:
            return Check(name, False, f"{problem} (on_done: {src.on_done})")
    if src.on_done == "move" and src.move_to is not None:
        problem = dir_problem(src.move_to, account)
        if problem:
            return Check(name, False, f"move_to {problem}")
    return Check(name, True, f"{path} readable, {n} entries")
