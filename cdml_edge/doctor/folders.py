"""The folders the agent fills (state, spool, retention, quarantine): writable, room to grow.

Entries in the retention folder that are not the ring's are reported (a warning).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cdml_edge.config import AppConfig
from cdml_edge.doctor.access import Account, W, X
from cdml_edge.doctor.check import Check
from cdml_edge.fsio import block_size, on_disk
from cdml_edge.units import format_size

# Room kept free beyond the byte bounds (logs, the OS, a model update).
RESERVE_BYTES = 64 * 1024**2


def _existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def dir_problem(path: Path, account: Account | None = None) -> str | None:
    """None when ``path`` is (or can be created as) a writable folder; else why not.

    For the calling process a file is created and removed; for ``account`` the permission
    bits decide.
    """
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a folder"
        if account is not None:
            return account.dir_problem(path, W | X)
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".cdml-doctor-"):
                pass
        except OSError as exc:
            return f"{path} is not writable: {exc.strerror or exc}"
        return None
    base = _existing_ancestor(path)
    if not base.is_dir():
        return f"{path} cannot be created: {base} is not a folder"
    if account is not None:
        problem = account.dir_problem(base, W | X)
        return None if problem is None else f"{path} cannot be created: {problem}"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"{path} cannot be created: {base} is not writable"
    return None


def _used_bytes(path: Path) -> int:
    """What the files in ``path`` take, in whole blocks (as the bounds count them)."""
    if not path.is_dir():
        return 0
    total = 0
    block = block_size(path)
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += on_disk(os.lstat(os.path.join(root, f)).st_size, block)
    return total


def _bounded_dirs(cfg: AppConfig) -> Iterator[tuple[str, Path, int]]:
    yield "spool", cfg.spool.dir, cfg.spool.max_bytes
    if cfg.retention is not None and cfg.retention.keep != "none":
        yield "retention", cfg.retention.dir, cfg.retention.max_bytes
    yield "quarantine", cfg.quarantine.dir, cfg.quarantine.max_bytes


def check_state_dir(cfg: AppConfig, account: Account | None = None) -> list[Check]:
    """The state folder is writable (the agent's lock lives there).

    The retention folder's foreign entries, if any, come as a warning.
    """
    out = []
    if cfg.state_dir is not None:
        problem = dir_problem(cfg.state_dir, account)
        out.append(Check("state folder", problem is None, problem or f"{cfg.state_dir} writable"))
    if cfg.retention is not None and cfg.retention.dir.is_dir():
        from cdml_edge.store.sidecar import foreign_names

        foreign = foreign_names(cfg.retention.dir)
        if foreign:
            shown = ", ".join(ascii(n) for n in foreign[:5])
            more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            out.append(
                Check(
                    "retention foreign",
                    True,
                    f"{cfg.retention.dir}: {len(foreign)} entries the "
                    f"ring did not write, left alone: {shown}{more}",
                    warn=True,
                )
            )
        out += _untrusted(cfg.retention.dir)
    return out


def _untrusted(ring: Path) -> list[Check]:
    """A warning naming what the ring ignores as untrusted (links, rows pointing outside)."""
    from cdml_edge.store.audit import untrusted_entries

    lines = untrusted_entries(ring)
    if not lines:
        return []
    more = f"; and {len(lines) - 5} more" if len(lines) > 5 else ""
    detail = f"{ring}: {len(lines)} entries ignored as untrusted: {'; '.join(lines[:5])}{more}"
    return [Check("retention untrusted", True, detail, warn=True)]


def check_writable_dirs(cfg: AppConfig, account: Account | None = None) -> list[Check]:
    """One check per bounded folder; free space is summed per filesystem."""
    checks: dict[str, Check] = {}
    need_by_dev: dict[int, list[tuple[str, int]]] = {}
    free_by_dev: dict[int, int] = {}
    for label, path, bound in _bounded_dirs(cfg):
        name = f"{label} folder"
        problem = dir_problem(path, account)
        if problem:
            checks[label] = Check(name, False, problem)
            continue
        base = _existing_ancestor(path)
        dev = os.stat(base).st_dev
        free_by_dev[dev] = _free_bytes(base)
        remaining = max(0, bound - _used_bytes(path))
        need_by_dev.setdefault(dev, []).append((label, remaining))
        checks[label] = Check(name, True, f"{path} writable, bound {format_size(bound)}")
    for dev, needs in need_by_dev.items():
        total = sum(n for _, n in needs) + RESERVE_BYTES
        free = free_by_dev[dev]
        for label, _ in needs:
            c = checks[label]
            if free < total:
                others = " + ".join(lbl for lbl, _ in needs)
                checks[label] = Check(
                    c.name,
                    False,
                    f"{c.detail.split(' writable')[0]}: only {format_size(free)} "
                    f"free, {others} may still grow by {format_size(total - RESERVE_BYTES)} "
                    f"(+{format_size(RESERVE_BYTES)} reserve)",
                )
            else:
                checks[label] = Check(c.name, True, f"{c.detail}, {format_size(free)} free")
    return list(checks.values())


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
