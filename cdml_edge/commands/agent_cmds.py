"""``cdml-edge run``: the edge agent."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from cdml_edge.config import ConfigError, load_config

EXIT_CONFIG_ERROR = 2
EXIT_START_FAILED = 3


def run(
    config: Path = typer.Option(..., "--config", "-c", help="The YAML configuration file."),
    duration: float | None = typer.Option(
        None, "--duration", help="Stop (draining windows in flight) after this many seconds."
    ),
    drain_timeout: float = typer.Option(
        10.0, "--drain-timeout", help="On stop, wait at most this long for windows in flight."
    ),
    workers: int = typer.Option(2, "--workers", min=1, help="Pipeline threads."),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING, ERROR."),
) -> None:
    """Watch the configured sources, score each window and publish the results."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from cdml_edge.agent.preflight import check_files

    try:
        cfg = load_config(config)
        check_files(cfg, str(config))  # a missing CA or password file: 2 now, not a crash
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_CONFIG_ERROR) from None
    from cdml_edge.agent.app import Agent
    from cdml_edge.agent.outputs.mqtt.spool import SpoolInUse
    from cdml_edge.agent.state import StateUnusable
    from cdml_edge.model.runner import InferenceError

    try:
        agent = Agent(cfg, config, workers=workers, drain_timeout=drain_timeout)
        code = agent.run(duration)
    except (StateUnusable, SpoolInUse, ConfigError) as exc:  # same state; a model check
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_CONFIG_ERROR) from None
    except InferenceError as exc:
        typer.echo(f"cannot start: {exc}", err=True)
        raise typer.Exit(EXIT_START_FAILED) from None
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
