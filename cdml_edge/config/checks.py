"""What a configuration needs from the machine, beyond its own syntax: the files it names.

:func:`file_problems` lists, as ``(field path, problem)``, every named file that does not
exist, is not a regular file or cannot be read by this process (models, label files, TLS CA /
certificate / key, the password file) and a ``password_env`` that is not set. ``cdml-edge
config validate`` and ``cdml-edge run`` both report them (exit status 2).
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
    """Every named file that cannot be read, an unset ``mqtt.password_env``, a missing extra."""
    out = []
    for field, path in named_files(cfg):
        problem = file_problem(path)
        if problem is not None:
            out.append((field, problem))
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


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent missing, or a module blocked in sys.modules
        return False


__all__ = ["file_problem", "file_problems", "named_files"]
