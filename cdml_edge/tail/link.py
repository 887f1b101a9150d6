"""What ``cdml-edge tail`` knows of its link to the broker: connected, or why not.

The follower thread notes each change (:meth:`Link.note`); the views read :meth:`Link.view`
(the ``link`` of a snapshot) and :func:`problem` says it in words.
"""

from __future__ import annotations

import threading
from typing import Any

CONNECTING = "connecting"
CONNECTED = "connected"
UNREACHABLE = "unreachable"  # no TCP (or TLS) connection: refused, no route, timed out
REFUSED = "refused"  # the broker answered the CONNECT with a refusal
LOST = "lost"  # was connected, the connection dropped


def os_reason(exc: BaseException | None) -> str:
    """``connection refused`` for ``[Errno 111] Connection refused``; the text of other errors."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return str(exc or "") or "cannot connect"


class Link:
    """The broker link's state, its reason, the protocol spoken and whether it ever connected."""

    def __init__(self, url: str, protocol: str) -> None:
        self._lock = threading.Lock()
        self._view: dict[str, Any] = {
            "url": url,
            "protocol": protocol,
            "state": CONNECTING,
            "connected": False,
            "reason": None,
            "ever_connected": False,
        }

    def note(self, state: str, reason: str | None = None, protocol: str | None = None) -> None:
        """The link is now ``state`` (``reason``: why it is not connected)."""
        with self._lock:
            v = self._view
            v.update(state=state, connected=state == CONNECTED, reason=reason)
            v["ever_connected"] = v["ever_connected"] or state == CONNECTED
            if protocol is not None:
                v["protocol"] = protocol

    def lost(self, reason: str) -> None:
        """The connection dropped: noted only after a connection (a refusal stays)."""
        with self._lock:
            connected = self._view["connected"]
        if connected:
            self.note(LOST, reason)

    def view(self) -> dict[str, Any]:
        """A copy of the state, for a snapshot's ``link``."""
        with self._lock:
            return dict(self._view)


def problem(link: dict[str, Any] | None) -> str | None:
    """Why a snapshot's ``link`` is not connected, in words; ``None`` when it is (or no link)."""
    if not link or link["connected"]:
        return None
    url, reason = link["url"], link["reason"]
    if link["state"] == UNREACHABLE:
        return f"not connected: cannot reach {url}: {reason} (retrying)"
    if link["state"] == REFUSED:
        return f"not connected: {url} refused the connection: {reason} (retrying)"
    if link["state"] == LOST:
        return f"not connected: lost the connection to {url}: {reason} (reconnecting)"
    return f"not connected yet: connecting to {url}"


def never_connected(link: dict[str, Any] | None) -> str | None:
    """The error of a run that never connected (``None`` if it did, or followed a file)."""
    if not link or link["ever_connected"]:
        return None
    reason = link["reason"] or "no answer"
    if link["state"] == REFUSED:
        reason = f"the broker refused the connection: {reason}"
    return f"never connected to {link['url']}: {reason}"
