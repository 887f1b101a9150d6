"""The folders the agent writes, and whether the systemd unit lets it write them.

Under ``ProtectSystem=strict`` everything outside ``ReadWritePaths=`` (and the unit's
``StateDirectory=``) is read-only for the service, whatever the permission bits say. The
installer writes a drop-in listing every folder of the configuration
(``python -m cdml_edge.doctor.unit dropin FILE``); the doctor checks the installed unit
covers them (:func:`check_unit_paths`).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

from cdml_edge.config import AppConfig, load_config
from cdml_edge.doctor.unit_file import dropins as _dropins
from cdml_edge.doctor.unit_file import unit_settings

DEFAULT_UNIT = Path("/etc/systemd/system/cdml-edge.service")


def write_paths(cfg: AppConfig) -> list[tuple[str, Path]]:
    """(label, folder) for every folder the agent creates files in, deletes or moves from."""
    out: list[tuple[str, Path]] = []
    if cfg.state_dir is not None:
        out.append(("state", cfg.state_dir))
    for s in cfg.sources:
        if s.path is not None and s.on_done in ("delete", "move"):
            out.append((f"source {s.name}", s.path))
        if s.on_done == "move" and s.move_to is not None:
            out.append((f"source {s.name} move_to", s.move_to))
    out.append(("spool", cfg.spool.dir))
    if cfg.retention is not None and cfg.retention.keep != "none":
        out.append(("retention", cfg.retention.dir))
    out.append(("quarantine", cfg.quarantine.dir))
    if cfg.output.jsonl not in (None, "-"):
        out.append(("output", Path(str(cfg.output.jsonl)).parent))
    return out


def source_dirs(cfg: AppConfig) -> list[Path]:
    """Every folder source and move_to (created by the installer, writable by the service)."""
    out: list[Path] = []
    for s in cfg.sources:
        for p in (s.path, s.move_to):
            if p is not None:
                out.append(p)
    return out


def _covered(path: Path, roots: Iterable[Path]) -> bool:
    p = Path(os.path.abspath(path))
    return any(p == r or r in p.parents for r in roots)


def minimal(paths: Iterable[Path]) -> list[Path]:
    """Absolute, de-duplicated, and without folders below another one of the list."""
    uniq = sorted({Path(os.path.abspath(p)) for p in paths}, key=lambda p: (len(p.parts), p))
    out: list[Path] = []
    for p in uniq:
        if not _covered(p, out):
            out.append(p)
    return sorted(out)


def _unit_word(path: Path) -> str:
    """``-/path`` for ``ReadWritePaths=``: ``%`` escaped, quoted when it has blanks."""
    word = "-" + str(path).replace("%", "%%")
    if any(c.isspace() or c in "\"'\\" for c in word):
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def render_dropin(cfg: AppConfig, source: str = "") -> str:
    """The ``60-paths.conf`` drop-in: one ``ReadWritePaths=`` per folder of ``cfg``.

    The ``-`` prefix lets the service start while a folder is missing (a USB disk not yet
    mounted); the agent then reports that folder itself.
    """
    folders = minimal([p for _, p in write_paths(cfg)] + source_dirs(cfg))
    lines = [
        f"# Written by install.sh from {source or 'the configuration'}: the folders the agent",
        "# writes (ProtectSystem=strict makes everything else read-only). Rerun install.sh",
        "# after changing folders in the configuration.",
        "[Service]",
    ]
    lines += [f"ReadWritePaths={_unit_word(p)}" for p in folders]
    if not cfg.health.watchdog:
        lines += [
            "# health.watchdog: false: no WATCHDOG=1 pings, so no watchdog timeout.",
            "WatchdogSec=0",
        ]
    return "\n".join(lines) + "\n"


def unreadable_unit(unit: Path) -> str | None:
    """Why the unit file or one of its drop-ins cannot be read, naming it; None when all can."""
    for path in [unit, *_dropins(unit)]:
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            return f"{path}: not UTF-8 (byte {exc.start}), as systemd needs"
        except OSError as exc:
            return f"{path}: cannot be read ({exc.strerror or exc})"
    return None


def writable_roots(unit: Path) -> list[Path] | None:
    """Folders the service may write, or None when ``ProtectSystem=`` is not ``strict``."""
    settings = unit_settings(unit)
    if (settings.get("ProtectSystem") or [""])[-1] != "strict":
        return None
    roots: list[Path] = []
    for value in settings.get("ReadWritePaths", []):
        for word in shlex.split(value):
            roots.append(Path(word.lstrip("-+").replace("%%", "%")))
    for value in settings.get("StateDirectory", []):
        roots += [Path("/var/lib") / w.split(":", 1)[0] for w in value.split()]
    for value in settings.get("RuntimeDirectory", []):
        roots += [Path("/run") / w.split(":", 1)[0] for w in value.split()]
    return roots


def unit_state_directory(unit: Path) -> str | None:
    """The ``$STATE_DIRECTORY`` systemd gives the service, or None without ``StateDirectory=``.

    That is ``/var/lib/<StateDirectory=>``, its folders joined by ``:``.
    """
    words = [
        w.split(":", 1)[0] for v in unit_settings(unit).get("StateDirectory", []) for w in v.split()
    ]
    return ":".join(str(Path("/var/lib") / w) for w in words) or None


def uncovered(cfg: AppConfig, unit: Path) -> list[tuple[str, Path]]:
    """The folders of ``cfg`` the unit keeps read-only (empty when all are covered)."""
    roots = writable_roots(unit)
    if roots is None:
        return []
    return [(label, p) for label, p in write_paths(cfg) if not _covered(p, roots)]


def healthz_url(cfg: AppConfig) -> str | None:
    """The local URL of the agent's ``/healthz`` (None when ``health.metrics_port`` is unset)."""
    port = cfg.health.metrics_port
    if not port:
        return None
    host = cfg.health.metrics_host
    host = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
    return f"http://{host}:{port}/healthz"


USAGE = (
    "usage: python -m cdml_edge.doctor.unit [--env-file FILE [--systemd VERSION]] "
    "dirs|dropin|healthz CONFIG"
)


def site_environment(path: Path, systemd: int | None) -> dict[str, str]:
    """What the unit's optional ``EnvironmentFile=-PATH`` gives the service.

    Read by systemd's rules (:mod:`~cdml_edge.doctor.unit_env`; ``systemd``: its version,
    for how a comment ending in a backslash is read). Nothing when the file is absent or
    systemd refuses it (then it skips the file too, said on stderr).
    """
    from cdml_edge.doctor.unit_env import EnvironmentFileError, read_environment_file

    if not os.path.lexists(path):
        return {}
    try:
        found = read_environment_file(path, comment_continues=systemd is not None and systemd < 254)
    except EnvironmentFileError as exc:
        print(f"{exc}: systemd skips the file, so do these folders", file=sys.stderr)
        return {}
    return found.values


def _options(args: list[str]) -> tuple[Path | None, int | None, list[str]] | None:
    """``--env-file FILE`` and ``--systemd VERSION`` taken off ``args``; None when malformed."""
    env_file: Path | None = None
    systemd: int | None = None
    while args and args[0] in ("--env-file", "--systemd"):
        if len(args) < 2:
            return None
        if args[0] == "--env-file":
            env_file = Path(args[1])
        elif args[1]:  # empty: the version is not known
            if not args[1].isdigit():
                return None
            systemd = int(args[1])
        args = args[2:]
    return env_file, systemd, args


def main(argv: list[str] | None = None) -> int:
    """Print, for install.sh, what the unit needs of configuration FILE; 2 on bad usage, else 0.

    ``dirs FILE``: the folders to create, one a line; ``dropin FILE``: the drop-in text;
    ``healthz FILE``: the agent's /healthz URL (nothing when the metrics port is off). With
    ``--env-file``, the configuration's ``${VAR}``s see that file's variables over this
    process's environment, as the unit's ``EnvironmentFile=`` gives them to the service.
    """
    parsed = _options(sys.argv[1:] if argv is None else list(argv))
    if parsed is None or len(parsed[2]) != 2 or parsed[2][0] not in ("dirs", "dropin", "healthz"):
        print(USAGE, file=sys.stderr)
        return 2
    env_file, systemd, (what, conf) = parsed
    from cdml_edge.doctor.unit_env import applied

    with applied(site_environment(env_file, systemd) if env_file is not None else {}):
        cfg = load_config(conf)
    if what == "dirs":
        for p in minimal(source_dirs(cfg)) + [p for _, p in write_paths(cfg)]:
            print(p)
    elif what == "healthz":
        print(healthz_url(cfg) or "")
    else:
        sys.stdout.write(render_dropin(cfg, conf))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
