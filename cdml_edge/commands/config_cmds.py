"""``cdml-edge config validate|schema``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cdml_edge.commands.exits import user_errors
from cdml_edge.config import config_schema
from cdml_edge.units import format_size

config_app = typer.Typer(
    help="Validate a configuration file or print its JSON Schema.", rich_markup_mode=None
)


@config_app.command("validate")
def validate(
    file: Path = typer.Argument(..., metavar="FILE", help="The YAML configuration file."),
) -> None:
    """Exit 0 when FILE can run here; exit 2 naming each problem otherwise.

    The problems: bad fields, files it names that cannot be read, a model of the wrong
    modality, a budget too small for one item.
    """
    from cdml_edge.agent.preflight import validate_runnable

    with user_errors("config validate"):
        checked = validate_runnable(file)
    config = checked.config
    sizes = ", ".join(f"{k} {format_size(n)}" for k, n in sorted(checked.max_item_bytes.items()))
    typer.echo(
        f"{file}: valid ({len(config.sources)} sources, {len(config.models)} models, "
        f"mqtt: {config.mqtt.url if config.mqtt else 'off'}, state: {config.state_dir}"
        + (f"; largest file the budget admits: {sizes}" if sizes else "")
        + ")"
    )


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
