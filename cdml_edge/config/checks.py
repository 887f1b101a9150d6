"""What a configuration needs from the machine, beyond its own syntax: the files it names.

:func:`file_problems` lists, as ``(field path, problem)``, every named file that does not
exist, is not a regular file or cannot be read by this process (models, label files, TLS CA /
certificate / key, the password file), a ``password_env`` that is not set, and every folder
it names (a folder source, ``move_to``, quarantine, retention, spool, state, the folder of
``output.jsonl``) that exists but is not a folder, or an ``output.jsonl`` that is a folder.
``cdml-edge config validate`` and ``cdml-edge run`` both report them (exit status 2).
:func:`no_sources_warning` says when a valid configuration watches nothing (an empty file).
"""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

from cdml_edge.config.schema import AppConfig


def named_files(cfg: AppConfig) -> list[tuple[str, Path]]:
    """``(field path, file)`` for every file the configuration names."""
    out = [(f"models.{key}.path", mc.path) for key, mc in cfg.models.items()]
    out += [
        (f"models.{key}.labels_file", mc.labels_file)
        for key, mc in cfg.models.items()
        if mc.labels_file is not None
    ]
    mq = cfg.mqtt
    if mq is not None:
        if mq.tls is not None:
            for name in ("ca", "cert", "key"):
                path = getattr(mq.tls, name)
                if path is not None:
                    out.append((f"mqtt.tls.{name}", path))
        if mq.password_file is not None:
            out.append(("mqtt.password_file", mq.password_file))
    return out


def named_folders(cfg: AppConfig) -> list[tuple[str, Path]]:
    """``(field path, folder)`` for every folder the configuration names (made if missing)."""
    out: list[tuple[str, Path]] = []
    for i, sc in enumerate(cfg.sources):
        if sc.kind == "folder" and sc.path is not None:
            out.append((f"sources[{i}].path", sc.path))
        if sc.move_to is not None:
            out.append((f"sources[{i}].move_to", sc.move_to))
    out.append(("quarantine.dir", cfg.quarantine.dir))
    if cfg.retention is not None:
        out.append(("retention.dir", cfg.retention.dir))
    out.append(("spool.dir", cfg.spool.dir))
    if cfg.state_dir is not None:
        out.append(("state_dir", cfg.state_dir))
    if cfg.output.jsonl not in (None, "-"):
        out.append(("output.jsonl", Path(cfg.output.jsonl).parent))
    return out


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a folder (it, or a parent, exists as something else), or ``None``."""
    p = Path(path)
    while True:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            if p.parent == p:
                return None
            p = p.parent  # made when needed: its parents must be folders
            continue
        except OSError:
            return None  # unreadable here: the agent's own error names it when it matters
        if stat.S_ISDIR(st.st_mode):
            return None
        return f"{path} is not a folder" if p == Path(path) else f"{path}: {p} is not a folder"


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file by this process, or ``None``.

    A FIFO or a device is never opened.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"{path} is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except PermissionError:
        return f"{path} is not readable by this user (uid {os.geteuid()})"
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    return None


def file_problems(cfg: AppConfig) -> list[tuple[str, str]]:
    """What the machine lacks for ``cfg``: ``(field path, problem)`` for each.

    Every named file that cannot be read, a named folder that is something else, an unset
    ``mqtt.password_env``, a missing extra.
    """
    out = []
    for field, path in named_files(cfg):
        problem = file_problem(path)
        if problem is not None:
            out.append((field, problem))
    for field, folder in named_folders(cfg):
        problem = folder_problem(folder)
        if problem is not None:
            out.append((field, problem))
    jsonl = cfg.output.jsonl
    if jsonl not in (None, "-") and os.path.isdir(jsonl):
        out.append(("output.jsonl", f"{jsonl} is a folder, not a file"))
    mq = cfg.mqtt
    if mq is not None and mq.password_env is not None and mq.password_env not in os.environ:
        out.append(("mqtt.password_env", f"environment variable {mq.password_env} is not set"))
    if mq is not None and mq.format == "sparkplug_b" and not _installed("google.protobuf"):
        out.append(
            (
                "mqtt.format",
                "sparkplug_b needs the protobuf package: pip install 'cdml-edge[sparkplug]'",
            )
        )
    return out


def no_sources_warning(cfg: AppConfig) -> str | None:
    """A warning for a configuration without sources (an empty file is one), else ``None``.

    ``sources`` may be empty (every section has a default), but the agent it starts watches
    nothing and publishes only its health.
    """
    if cfg.sources:
        return None
    return (
        "no sources: the agent would watch nothing (add a folder or camera under sources; "
        "an empty file is a configuration of defaults only)"
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent missing, or a module blocked in sys.modules
        return False


__all__ = [
    "file_problem",
    "file_problems",
    "folder_problem",
    "named_files",
    "named_folders",
    "no_sources_warning",
]
