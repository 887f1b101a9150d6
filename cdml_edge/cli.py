"""The ``cdml-edge`` command line: one thin command per verb.

Each area keeps its commands in ``cdml_edge/commands/<area>.py`` with a
``register(app)`` function; the logic lives in the packages those commands call.
Exit codes and one-line user errors: :mod:`cdml_edge.commands.exits`.
"""

from __future__ import annotations

import importlib

import typer

from cdml_edge import __version__
from cdml_edge.commands.exits import OneLineErrorsGroup
from cdml_edge.commands.help_text import use_plain_value_names

use_plain_value_names()

app = typer.Typer(
    name="cdml-edge",
    help="Stream ML data straight out of compressed archives; run the edge agent.",
    cls=OneLineErrorsGroup,
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion: bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts are plain text: no markup, flags shown as flags
)

# Areas whose commands are registered on the root app, in help order.
COMMAND_MODULES = [
    "cdml_edge.commands.config_cmds",
    "cdml_edge.commands.agent_cmds",
    "cdml_edge.commands.trial_cmds",
    "cdml_edge.commands.tail_cmds",
    "cdml_edge.commands.doctor_cmds",
    "cdml_edge.commands.calibrate_cmds",
    "cdml_edge.commands.train_cmds",
    "cdml_edge.commands.replay_cmds",
    "cdml_edge.commands.archive_cmds",
]


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"cdml-edge {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """cdml-edge: archives in, results out."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
