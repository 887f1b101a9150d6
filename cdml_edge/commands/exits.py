"""Exit codes of every command, and user errors as one line on stderr.

Every command exits with one of:

* ``0`` (:data:`EXIT_OK`): success;
* ``1`` (:data:`EXIT_FAILED`): the work ran and failed or found a problem (``scan``: a
  corrupt, unsafe or unreadable archive; ``doctor``: a check failed; ``replay`` /
  ``export``: the run failed);
* ``2`` (:data:`EXIT_USAGE`): a usage error: an unknown option, a bad value, a missing
  input file, an input of the wrong format, an invalid configuration;
* ``3`` (:data:`EXIT_START_FAILED`, ``run`` only): the agent could not start.

A user error is printed as ``cdml-edge COMMAND: MESSAGE`` (one line; an invalid
configuration prints one such line per bad field) and never as a traceback:
:func:`user_errors` maps the typed errors of a command to its exit code, and
:class:`OneLineErrorsGroup` does the same for the command-line parser's own errors.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import typer
from typer import TyperException  # the parser's errors (typer carries its own click)
from typer.core import TyperGroup

from cdml_edge.errors import CdmlError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_START_FAILED = 3

PROG = "cdml-edge"

#: OS errors about an input the user named: a usage error, not a failed run
INPUT_OS_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)

ErrorTypes = tuple[type[BaseException], ...]


def fail(command: str, message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``cdml-edge COMMAND: MESSAGE`` (each line of it) on stderr and exit ``code``."""
    for line in message.splitlines() or [""]:
        typer.echo(f"{PROG} {command}: {line}", err=True)
    raise typer.Exit(code)


def describe(exc: BaseException) -> str:
    """The message of an error, naming the file for an ``OSError``."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def user_errors(command: str, *, failed: ErrorTypes = (), usage: ErrorTypes = ()) -> Iterator[None]:
    """Turn the errors a command expects into one line on stderr and its exit code.

    ``failed`` (checked first) exit 1; ``usage``, every :class:`~cdml_edge.errors.CdmlError`
    and the OS errors of :data:`INPUT_OS_ERRORS` exit 2; any other ``OSError`` (a full
    disk, an I/O error) exits 1. Anything else is a bug and keeps its traceback.
    """
    usage_errors: ErrorTypes = (CdmlError, *INPUT_OS_ERRORS, *usage)
    try:
        yield
    except typer.Exit:
        raise
    except failed as exc:
        fail(command, describe(exc), EXIT_FAILED)
    except usage_errors as exc:
        fail(command, describe(exc), EXIT_USAGE)
    except OSError as exc:
        fail(command, describe(exc), EXIT_FAILED)


class OneLineErrorsGroup(TyperGroup):
    """The root command group: the parser's errors print as one line and exit 2.

    An unknown option, a bad value or a missing argument prints
    ``cdml-edge COMMAND: problem (try ... --help)``.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line and exit with its code; a parser error exits as one line.

        An abort exits 1. Without ``standalone_mode`` this is click's own ``main``.
        """
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except TyperException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `cdml-edge` alone: the help
                exc.show()  # type: ignore[attr-defined]
                sys.exit(getattr(exc, "exit_code", EXIT_USAGE))
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else prog_name or PROG
            message = " ".join(exc.format_message().split())
            hint = f" (try '{where} --help')" if ctx is not None else ""
            typer.echo(f"{where}: {message}{hint}", err=True)
            sys.exit(getattr(exc, "exit_code", EXIT_USAGE))
        except typer.Abort:
            typer.echo(f"{prog_name or PROG}: aborted", err=True)
            sys.exit(EXIT_FAILED)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_START_FAILED",
    "EXIT_USAGE",
    "INPUT_OS_ERRORS",
    "OneLineErrorsGroup",
    "describe",
    "fail",
    "user_errors",
]
