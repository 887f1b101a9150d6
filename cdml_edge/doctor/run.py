"""All checks for a configuration, in a stable order; the doctor's one entry point."""

from __future__ import annotations

import os
from pathlib import Path

from cdml_edge.config import AppConfig, ConfigError, load_config
from cdml_edge.config.checks import no_sources_warning
from cdml_edge.doctor.broker import check_broker
from cdml_edge.doctor.check import DEFAULT_TIMEOUT_S, Check
from cdml_edge.doctor.folders import check_state_dir, check_writable_dirs
from cdml_edge.doctor.model_checks import check_model
from cdml_edge.doctor.report import DoctorReport
from cdml_edge.doctor.sources import check_source
from cdml_edge.doctor.system import (
    check_account,
    check_native_reader,
    check_release,
    check_unit_paths,
    default_unit,
)


def diagnose(
    config: Path,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    user: str | None = None,
    unit: Path | None = None,
) -> DoctorReport:
    """Load ``config`` and run every check for it (see :func:`run_checks`).

    An invalid configuration gives a report whose last check is the failed ``config`` one.
    With a unit (``unit``, else the installed one), the configuration is loaded and checked
    in the environment the service gets: the variables of the unit's ``EnvironmentFile=``
    are set over this process's for the time of the checks (the ``unit environment`` check
    names each file, first in the report), and outside systemd ``$STATE_DIRECTORY`` is read
    from the unit's ``StateDirectory=`` (the folder the service will use).
    """
    if unit is None:
        unit = default_unit()
    values: dict[str, str] = {}
    first: list[Check] = []
    if unit is not None:
        from cdml_edge.doctor.unit import unreadable_unit

        problem = unreadable_unit(unit)
        if problem is not None:
            first.append(Check("unit", False, f"{problem}; the checks of the unit are skipped"))
            unit = None
    if unit is not None:
        from cdml_edge.doctor.unit_env import unit_environment  # see default_unit()

        values, env_check = unit_environment(unit)
        first += [env_check] if env_check is not None else []
    from cdml_edge.doctor.unit_env import applied

    with applied(values):
        state_directory = None
        if unit is not None and not os.environ.get("STATE_DIRECTORY"):
            from cdml_edge.doctor.unit import unit_state_directory

            state_directory = unit_state_directory(unit)
        try:
            cfg = load_config(config, state_directory=state_directory)
        except ConfigError as exc:
            return DoctorReport([*first, Check("config", False, str(exc))], config_error=True)
        checks = [*first, Check("config", True, f"{config} valid")]
        if (empty := no_sources_warning(cfg)) is not None:
            checks.append(Check("sources", True, empty, warn=True))
        checks += run_checks(cfg, timeout_s=timeout_s, user=user, unit=unit)
    return DoctorReport(checks)


def run_checks(
    cfg: AppConfig,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    user: str | None = None,
    euid: int | None = None,
    unit: Path | None = None,
) -> list[Check]:
    """Every check for ``cfg``, in a stable order; never raises for a failed check.

    ``user``: judge folder access for that account (the unit's ``User=``) by permission bits
    instead of probing as this process. ``euid`` defaults to ``os.geteuid()``. ``unit``: the
    installed service file whose ``ReadWritePaths=`` must cover the folders (default: the
    one install.sh writes, when present).
    """
    checks, account = check_account(user, euid)
    checks.append(check_native_reader())
    checks.append(check_release())
    checks += [check_model(modality, cfg) for modality in cfg.models]
    checks += [check_source(src, timeout_s, account) for src in cfg.sources]
    checks += check_state_dir(cfg, account)
    checks += check_writable_dirs(cfg, account)
    if unit is None:
        unit = default_unit()
    if unit is not None:
        checks.append(check_unit_paths(cfg, unit))
    checks += check_broker(cfg.mqtt, timeout_s)
    return checks
