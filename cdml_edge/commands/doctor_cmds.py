"""``cdml-edge doctor --config FILE``: one line per check, non-zero exit on any failure."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from cdml_edge.config import ConfigError, load_config

EXIT_FAILED = 1
EXIT_CONFIG_ERROR = 2


def _utf8_stdout() -> bool:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return enc == "utf8"


def doctor(
    config: Path = typer.Option(..., "--config", "-c", help="The YAML configuration file."),
    timeout: float = typer.Option(5.0, "--timeout", help="Seconds per network check."),
    ascii_only: bool = typer.Option(False, "--ascii", help="OK/FAIL instead of ✓/✗."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as a JSON list."),
    user: str | None = typer.Option(
        None, "--user", "-u",
        help="Judge folder access for this account (the unit's User=, e.g. cdml-edge).",
    ),
    unit: Path | None = typer.Option(
        None, "--unit",
        help="Service file whose ReadWritePaths= must cover the folders "
        "(default: /etc/systemd/system/cdml-edge.service when installed).",
    ),
) -> None:
    """Check that CONFIG can run here: native reader, models, folders, broker.

    Exit 0 when every check passes, 1 when one fails, 2 when the configuration is invalid.
    Warnings (e.g. running as root without --user) are printed but do not fail.
    """
    from cdml_edge.doctor.checks import Check, run_checks

    ascii_only = ascii_only or not _utf8_stdout()
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        if as_json:
            typer.echo(json.dumps([{"name": "config", "ok": False, "detail": str(exc)}]))
        else:
            typer.echo(Check("config", False, str(exc)).line(ascii_only))
        raise typer.Exit(EXIT_CONFIG_ERROR) from None
    checks = [Check("config", True, f"{config} valid")]
    checks += run_checks(cfg, timeout_s=timeout, user=user, unit=unit)
    if as_json:
        typer.echo(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        for c in checks:
            typer.echo(c.line(ascii_only))
        real = [c for c in checks if not c.warn]
        failed = sum(not c.ok for c in real)
        warned = len(checks) - len(real)
        tail = f", {warned} warning{'s' if warned > 1 else ''}" if warned else ""
        typer.echo(f"{len(real) - failed}/{len(real)} checks passed{tail}")
    if any(not c.ok for c in checks):
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Attach ``doctor`` to the root app."""
    app.command("doctor")(doctor)
