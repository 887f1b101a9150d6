"""``cdml-edge run``: the edge agent."""

from __future__ import annotations

from pathlib import Path

import typer

from cdml_edge.commands.exits import EXIT_START_FAILED, EXIT_USAGE, fail, user_errors
from cdml_edge.commands.journal_logs import configure_logging
from cdml_edge.config import ConfigError, load_config


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
    configure_logging(log_level)
    from cdml_edge.agent.preflight import check_files

    with user_errors("run"):
        cfg = load_config(config)
        check_files(cfg, str(config))  # a missing CA or password file: 2 now, not a crash
    from cdml_edge.agent.app import Agent
    from cdml_edge.agent.state import StateUnusable
    from cdml_edge.model.runner import InferenceError
    from cdml_edge.outputs.mqtt.spool import SpoolError
    from cdml_edge.store.ondisk import RetentionError

    try:
        agent = Agent(cfg, config, workers=workers, drain_timeout=drain_timeout)
        code = agent.run(duration)
    except (StateUnusable, SpoolError, RetentionError, ConfigError) as exc:  # its folders
        fail("run", str(exc), EXIT_USAGE)
    except InferenceError as exc:
        fail("run", f"cannot start: {exc}", EXIT_START_FAILED)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Attach ``run`` to the root app."""
    app.command("run")(run)
