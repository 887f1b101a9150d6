"""This machine: the native reader, whose folders are judged (``--user``), the unit's paths."""

from __future__ import annotations

import os
from pathlib import Path

from cdml_edge.config import AppConfig
from cdml_edge.doctor.access import Account, AccountError
from cdml_edge.doctor.check import Check, guard

# The unit's SupplementaryGroups=: counted for --user like the account's own groups.
UNIT_GROUPS = ("video",)


def check_account(user: str | None, euid: int | None = None) -> tuple[list[Check], Account | None]:
    """Whose folder access the checks judge: ``user``'s by permission bits, else this process's.

    This process's comes with a warning when that is root: every probe passes for root.
    """
    if user is not None:
        try:
            account = Account.lookup(user, UNIT_GROUPS)
        except AccountError as exc:
            return [Check("user", False, str(exc))], None
        return [
            Check(
                "user",
                True,
                f"folder access judged for {user} (uid {account.uid}, {len(account.gids)} groups)",
            )
        ], account
    if (os.geteuid() if euid is None else euid) == 0:
        return [
            Check(
                "privileges",
                True,
                "running as root: every folder is writable for root, so the "
                "folder checks say nothing about the service; pass --user cdml-edge (or run "
                "sudo -u cdml-edge ...)",
                warn=True,
            )
        ], None
    return [], None


def check_release() -> Check:
    """The release this venv is, and whether its packages match the lock it came from."""
    from cdml_edge.release import current

    rel = current()
    return Check("release", True, rel.describe(), warn=rel.lock_state == "differs")


def check_native_reader() -> Check:
    """The C reader (cffi) is built and loads, and which backends it decodes with.

    No silent slow Python fallback: a missing core fails; a slower backend (zlib's inflate
    instead of libdeflate, no C zstd decoder) is a warning.
    """
    name = "native reader"
    try:
        from cdml_edge import archive
        from cdml_edge.archive.native import backends
    except ImportError as exc:
        return Check(name, False, f"cdml_edge.archive cannot be imported: {exc}")
    probe = getattr(archive, "native_available", None)
    if probe is None:
        return Check(name, False, "cdml_edge.archive.native_available() is missing")
    try:
        built = bool(probe())
        found = backends() if built else {}
    except Exception as exc:  # a broken build may raise on load
        return Check(name, False, f"native_available() raised {type(exc).__name__}: {exc}")
    if not built:
        return Check(
            name,
            False,
            "C reader not built: the slow Python fallback would be used "
            "(reinstall with a C compiler: pip install --force-reinstall --no-deps cdml-edge)",
        )
    detail = f"C reader (cffi) loads; inflate: {found['inflate']}, zstd: {found['zstd']}"
    slower = _slower_backends(found)
    if slower:
        return Check(name, True, f"{detail}; slower: {'; '.join(slower)}", warn=True)
    return Check(name, True, detail)


def _slower_backends(found: dict[str, str]) -> list[str]:
    out = []
    if found["inflate"] != "libdeflate":
        out.append("ZIP inflate and CRC-32 through zlib (install libdeflate0 for ~2x)")
    if not found["zstd"].startswith("libzstd"):
        out.append(
            "tar.zst frames decoded in Python, the core was built with CDML_EDGE_ZSTD=none "
            "(reinstall without it)"
        )
    return out


def check_unit_paths(cfg: AppConfig, unit: Path) -> Check:
    """Every folder the agent writes is in the unit's ``ReadWritePaths=`` (or state dir)."""
    from cdml_edge.doctor.unit import uncovered  # see default_unit()

    name = "unit paths"

    def run() -> Check:
        missing = uncovered(cfg, unit)
        if missing:
            listed = ", ".join(f"{label} {path}" for label, path in missing)
            return Check(
                name,
                False,
                f"{unit} keeps read-only (ProtectSystem=strict): {listed}; "
                "rerun install.sh or add ReadWritePaths= (systemctl edit cdml-edge)",
            )
        return Check(name, True, f"{unit}: every folder of the configuration is writable")

    return guard(name, run)


def default_unit() -> Path | None:
    """The service file install.sh writes, when it is installed here.

    :mod:`cdml_edge.doctor.unit` is imported when used, not with the package:
    ``python -m cdml_edge.doctor.unit`` (install.sh) must not find itself already imported.
    """
    from cdml_edge.doctor.unit import DEFAULT_UNIT

    return DEFAULT_UNIT if DEFAULT_UNIT.is_file() else None
