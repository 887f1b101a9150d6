"""The ``cdml-edge`` console script: the command line, with Ctrl-C a quiet exit 130.

The commands are imported inside :func:`main`, so a Ctrl-C while they load (over a
second on a board) ends the process like a Ctrl-C anywhere else: no traceback.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process ended by Ctrl-C


def main() -> None:
    """Run the ``cdml-edge`` command line."""
    try:
        from cdml_edge.cli import app

        app()
    except KeyboardInterrupt:
        sys.stderr.write("\ncdml-edge: interrupted\n")
        raise SystemExit(INTERRUPTED) from None
