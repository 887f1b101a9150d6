"""Log lines for the terminal, or for journald with their priority.

Under systemd, stderr is a stream to journald (``$JOURNAL_STREAM`` names its device and
inode). journald takes a line's priority from a ``<N>`` prefix (``SyslogLevelPrefix=``, on
by default) and stamps the time itself; without the prefix every line was priority 6, so
``journalctl -p warning`` showed no warning or error, and each line carried its time twice.
"""

from __future__ import annotations

import logging
import os
import sys

TERMINAL_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

SYSLOG_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


class JournalFormatter(logging.Formatter):
    """``<N>name: message``, each line of a message with the record's priority."""

    def format(self, record: logging.LogRecord) -> str:
        """The record's lines, each led by its syslog priority."""
        prefix = f"<{priority(record.levelno)}>"
        text = f"{record.name}: {super().format(record)}"
        return "\n".join(prefix + line for line in text.split("\n"))


def priority(levelno: int) -> int:
    """The syslog priority of a logging level (a level between two takes the graver)."""
    for level in sorted(SYSLOG_PRIORITY, reverse=True):
        if levelno >= level:
            return SYSLOG_PRIORITY[level]
    return 7


def stderr_is_journal() -> bool:
    """Whether stderr is the journald stream ``$JOURNAL_STREAM`` names (``dev:inode``)."""
    named = os.environ.get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(part) for part in named.split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def configure_logging(level: str) -> None:
    """Log at ``level`` to stderr: with priorities for journald, else with the time."""
    handler = logging.StreamHandler()
    if stderr_is_journal():
        handler.setFormatter(JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(logging.Formatter(TERMINAL_FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
