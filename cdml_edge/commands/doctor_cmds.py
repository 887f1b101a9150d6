"""``cdml-edge doctor --config FILE``: one line per check, non-zero exit on any failure."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

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
        None,
        "--user",
        "-u",
        help="Judge folder access for this account (the unit's User=, e.g. cdml-edge).",
    ),
    unit: Path | None = typer.Option(
        None,
        "--unit",
        help="Service file whose EnvironmentFile= the checks run with, and whose "
        "ReadWritePaths= must cover the folders "
        "(default: /etc/systemd/system/cdml-edge.service when installed).",
    ),
) -> None:
    """Check that CONFIG can run here: native reader, models, folders, broker.

    Exit 0 when every check passes, 1 when one fails, 2 when the configuration is invalid.
    Warnings (e.g. running as root without --user) are printed but do not fail.
    """
    from cdml_edge.doctor import diagnose

    report = diagnose(config, timeout_s=timeout, user=user, unit=unit)
    typer.echo(report.render(ascii_only or not _utf8_stdout(), as_json))
    if report.config_error:
        raise typer.Exit(EXIT_CONFIG_ERROR)
    if report.failed:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Attach ``doctor`` to the root app."""
    app.command("doctor")(doctor)
