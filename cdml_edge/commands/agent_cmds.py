"""``cdml-edge run``: the edge agent.

Exits 0 once stopped (``--duration``, SIGTERM/SIGINT); 1 when it stopped because the reader of
its results on stdout (``output: {jsonl: "-"}``) went away (``| head -1``): what it had not
delivered stays in the folders for the next run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cdml_edge.commands.exits import (
    EXIT_FAILED,
    EXIT_START_FAILED,
    EXIT_USAGE,
    fail,
    user_errors,
)
from cdml_edge.commands.journal_logs import configure_logging
from cdml_edge.config import ConfigError, load_config

if TYPE_CHECKING:
    from cdml_edge.outputs.base import Output


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
    if _stdout_closed(agent.output):
        code = code or EXIT_FAILED
    raise typer.Exit(code)


def _stdout_closed(output: Output) -> bool:
    """Whether ``output`` wrote results to stdout and its reader went away.

    Then stdout is pointed at ``/dev/null``: what is left in its buffer has nowhere to go,
    and flushing it into the closed pipe at exit would print an error and change the code.
    """
    from cdml_edge.outputs.factory import leaves
    from cdml_edge.outputs.jsonl import JsonlOutput

    if not any(isinstance(o, JsonlOutput) and o.stdout_closed for o in leaves(output)):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return True


def register(app: typer.Typer) -> None:
    """Attach ``run`` to the root app."""
    app.command("run")(run)
