"""``cdml-edge tail``: a live view of what an appliance publishes.

Exits 1 when it followed a broker and never connected to it; a closed stdout
(``tail --json | head -1``) ends it quietly with 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from cdml_edge.commands.exits import EXIT_FAILED, EXIT_OK, fail, user_errors
from cdml_edge.config import load_config


@contextlib.contextmanager
def _quiet_when_stdout_closes() -> Iterator[None]:
    """A reader that went away (``| head -1``) ends the command with 0 and no message."""
    try:
        yield
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush into the closed pipe
        os.close(devnull)
        raise typer.Exit(EXIT_OK) from None


def tail(
    config: Path = typer.Option(..., "--config", "-c", help="The appliance's YAML configuration."),
    file: Path | None = typer.Option(
        None,
        "--file",
        help="Follow this JSON-lines file (default: output.jsonl when the config has no broker).",
    ),
    broker: str | None = typer.Option(
        None, "--broker", help="mqtt[s]://host:port instead of the config's mqtt.url."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the view as one JSON object per interval (for scripts)."
    ),
    interval: float = typer.Option(1.0, "--interval", min=0.05, help="Seconds between views."),
    duration: float | None = typer.Option(
        None, "--duration", min=0, help="Stop after this many seconds (default: Ctrl-C)."
    ),
) -> None:
    """Show what an appliance publishes, live.

    Per-source rates and latency, the last results (anomalies in red), error events and
    health; from its broker (the same config file) or from its output.jsonl. While the broker
    cannot be reached or refuses the connection, the view says so and why; exits 1 if it
    never connected.
    """
    from cdml_edge.tail.follower import choose, run_tail
    from cdml_edge.tail.link import never_connected

    with user_errors("tail"), _quiet_when_stdout_closes():
        cfg = load_config(config)
        followed = choose(cfg, file, broker, str(config))
        if followed.file is not None:
            _check_followed_file(followed.file)
        where = followed.describe(cfg)
        if json_out:
            last = run_tail(
                cfg,
                followed,
                lambda snap: typer.echo(json.dumps(snap)),
                interval=interval,
                duration=duration,
            )
        else:
            last = _live(cfg, followed, where, interval, duration)
        message = never_connected(last["link"])
        if message:
            fail("tail", message, EXIT_FAILED)


def _check_followed_file(path: Path) -> None:
    """Say a file to follow is not there yet (on stderr); refuse one that is not a file."""
    try:
        st = path.stat()
    except FileNotFoundError:
        typer.echo(f"cdml-edge tail: {path} does not exist yet: waiting for it", err=True)
        return
    except OSError as exc:
        fail("tail", f"{path}: cannot be read: {exc.strerror or exc}")
    if not stat.S_ISREG(st.st_mode):
        fail("tail", f"{path}: not a regular file (a JSON-lines file is followed)")


def _live(
    cfg: Any, followed: Any, where: str, interval: float, duration: float | None
) -> dict[str, Any]:
    from rich.console import Console
    from rich.live import Live

    from cdml_edge.health.board import ActivityBoard
    from cdml_edge.tail.console import render
    from cdml_edge.tail.follower import run_tail

    console = Console()
    if not console.is_terminal:  # a log or a pipe: plain lines, not a redrawn screen
        return _plain(cfg, followed, where, interval, duration)
    empty = ActivityBoard(cfg.device.id).snapshot()
    with Live(render(empty, where), console=console, auto_refresh=False) as live:
        return run_tail(
            cfg,
            followed,
            lambda snap: live.update(render(snap, where), refresh=True),
            interval=interval,
            duration=duration,
        )


def _plain(
    cfg: Any, followed: Any, where: str, interval: float, duration: float | None
) -> dict[str, Any]:
    from cdml_edge.tail.console import plain_lines
    from cdml_edge.tail.follower import run_tail

    seen = {"errors": 0}

    def show(snap: dict[str, Any]) -> None:
        for line in plain_lines(snap, where, seen["errors"]):
            typer.echo(line)
        seen["errors"] = len(snap["errors"])

    return run_tail(cfg, followed, show, interval=interval, duration=duration)


def register(app: typer.Typer) -> None:
    """Attach ``tail`` to the root app."""
    app.command("tail")(tail)
