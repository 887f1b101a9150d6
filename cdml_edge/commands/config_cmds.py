"""``cdml-edge config validate|schema``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cdml_edge.commands.exits import fail, user_errors
from cdml_edge.config import AppConfig, ConfigError, config_schema
from cdml_edge.units import counted, format_size

config_app = typer.Typer(
    help="Validate a configuration file or print its JSON Schema.", rich_markup_mode=None
)


@config_app.command("validate")
def validate(
    file: Path | None = typer.Argument(
        None, metavar="FILE", show_default=False, help="The YAML configuration file."
    ),
    config: Path | None = typer.Option(
        None, "--config", "-c", show_default=False, help="The YAML configuration file."
    ),
    for_board: bool = typer.Option(
        False,
        "--for-board",
        help="The configuration is for another machine (a board, checked from a laptop or "
        "CI): check its fields and cross-field rules, open none of the files it names, and "
        "list the checks left to that machine.",
    ),
) -> None:
    """Exit 0 when the configuration can run here; exit 2 naming each problem otherwise.

    The problems: bad fields, files it names that cannot be read, a model of the wrong
    modality, a budget too small for one item. Give the file as --config FILE (like every
    other command) or as FILE.
    """
    path = _config_path(file, config)
    if for_board:
        _validate_for_board(path)
        return
    from cdml_edge.agent.preflight import unscored_warning, validate_runnable
    from cdml_edge.config.checks import no_sources_warning

    with user_errors("config validate"):
        try:
            checked = validate_runnable(path)
        except ConfigError as exc:
            if any(msg.endswith("does not exist") for _, msg in exc.problems):
                hint = "for another machine? --for-board checks it without the files it names"
                raise ConfigError(exc.file, [*exc.problems, ("", hint)]) from None
            raise
    sizes = ", ".join(f"{k} {format_size(n)}" for k, n in sorted(checked.max_item_bytes.items()))
    typer.echo(
        f"{path}: valid ({_summary(checked.config)}"
        + (f"; largest file the budget admits: {sizes}" if sizes else "")
        + ")"
    )
    _warn(path, unscored_warning(checked.config))
    _warn(path, no_sources_warning(checked.config))


def _warn(path: Path, warning: str | None) -> None:
    if warning is not None:
        typer.echo(f"{path}: warning: {warning}")


def _config_path(file: Path | None, config: Path | None) -> Path:
    if file is not None and config is not None and file != config:
        fail("config validate", f"two files given ({file} and --config {config}): give one")
    path = config if config is not None else file
    if path is None:
        fail("config validate", "no configuration given: cdml-edge config validate --config FILE")
    return path


def _summary(config: AppConfig) -> str:
    return (
        f"{counted(len(config.sources), 'source')}, {counted(len(config.models), 'model')}, "
        f"mqtt: {config.mqtt.url if config.mqtt else 'off'}, state: {config.state_dir}"
    )


def _validate_for_board(path: Path) -> None:
    from cdml_edge.agent.preflight import validate_elsewhere
    from cdml_edge.config.checks import no_sources_warning

    with user_errors("config validate"):
        checked = validate_elsewhere(path)
    typer.echo(f"{path}: valid for another machine ({_summary(checked.config)})")
    _warn(path, no_sources_warning(checked.config))
    if checked.skipped:
        typer.echo("not checked here (they need that machine's files and environment):")
        for field, what in checked.skipped:
            typer.echo(f"  {field}: {what}")


@config_app.command("schema")
def schema(
    payloads: bool = typer.Option(
        False, "--payloads", help="Print the JSON Schema of every MQTT payload instead."
    ),
    markdown: bool = typer.Option(
        False, "--markdown", help="Print the configuration reference as a Markdown table."
    ),
) -> None:
    """Print the JSON Schema of the configuration (or of the MQTT payloads)."""
    if markdown:
        from cdml_edge.config.reference import config_reference_markdown

        typer.echo(config_reference_markdown(), nl=False)
    elif payloads:
        from cdml_edge.window.payloads import payload_schemas

        typer.echo(json.dumps(payload_schemas(), indent=2))
    else:
        typer.echo(json.dumps(config_schema(), indent=2))


def register(app: typer.Typer) -> None:
    """Attach the ``config`` group to the root app."""
    app.add_typer(config_app, name="config")
