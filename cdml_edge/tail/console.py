"""The terminal view of ``cdml-edge tail``: the activity board drawn with rich.

Every text from a payload or a topic goes into the tables as a :class:`~rich.text.Text`,
never as a string: rich would read ``[`` in a file name as markup (and refuse ``[/]``).
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cdml_edge.tail.link import problem
from cdml_edge.units import counted, format_size

RECENT_ROWS = 10


def _n(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _header(snap: dict[str, Any], where: str) -> Text:
    status = (snap.get("status") or {}).get("state")
    age = snap.get("last_message_age_s")
    text = Text.assemble(
        ("cdml-edge tail ", "bold"),
        (snap["device"], "bold cyan"),
        f"  {where}  ",
        f"{snap['messages']} messages",
    )
    if status:
        text.append(f"  {status}", style="green" if status == "online" else "red")
    if age is not None:
        text.append(f"  last {age:.1f} s ago", style="dim")
    return text


def _sources(snap: dict[str, Any]) -> Table:
    t = Table(title="sources", title_justify="left", expand=False)
    for col in (
        "source",
        "rate/s",
        "latency ms",
        "window ms",
        "items",
        "windows",
        "anomalies",
        "errors",
        "last result",
    ):
        t.add_column(col, justify="left" if col in ("source", "last result") else "right")
    for name, s in snap["sources"].items():
        last = s["last"][-1] if s["last"] else None
        shown = "" if last is None else f"{last['item'] or ''} {last.get('label') or ''}"
        t.add_row(
            Text(name),
            f"{s['rate_per_s']:.2f}",
            _n(s["latency_ms"]),
            _n(s["window_ms"]),
            str(s["items"]),
            str(s["windows"]),
            Text(str(s["anomalies"]), style="bold red" if s["anomalies"] else ""),
            Text(str(s["errors"]), style="bold red" if s["errors"] else ""),
            Text(shown),
        )
    return t


def _recent(snap: dict[str, Any]) -> Table:
    rows = sorted(
        ((r.get("ts") or 0.0, name, r) for name, s in snap["sources"].items() for r in s["last"]),
        key=lambda x: x[0],
    )[-RECENT_ROWS:]
    t = Table(title="last results", title_justify="left")
    for col in ("source", "item", "label", "score", "anomaly score", "latency ms"):
        t.add_column(col, justify="right" if "score" in col or "ms" in col else "left")
    for _, name, r in reversed(rows):
        style = "bold red" if r.get("anomaly") else ""
        t.add_row(
            Text(name),
            Text(r.get("item") or ""),
            Text(r.get("label") or ""),
            _n(r.get("score"), 3),
            _n(r.get("anomaly_score"), 3),
            _n(r.get("latency_ms")),
            style=style,
        )
    return t


def _errors(snap: dict[str, Any]) -> Table:
    t = Table(title="errors", title_justify="left")
    for col in ("time", "source", "item", "error", "message"):
        t.add_column(col, overflow="fold")
    for e in reversed(snap["errors"][-5:]):
        t.add_row(
            time.strftime("%H:%M:%S", time.localtime(e.get("ts") or 0)),
            Text(e.get("source") or ""),
            Text(e.get("item") or ""),
            Text(e.get("error_type") or ""),
            Text((e.get("message") or "")[:120]),
            style="red",
        )
    return t


def _health(snap: dict[str, Any]) -> Text:
    h = snap.get("health")
    if not h:
        return Text("health: none yet", style="dim")
    broker = "connected" if h.get("broker_connected") else "not connected"
    text = Text.assemble(
        ("health ", "bold"),
        f"uptime {h.get('uptime_s', 0):.0f} s · broker {broker} · ",
        f"outbox {h.get('outbox_depth', 0)} · spool {format_size(h.get('spool_bytes', 0))} "
        f"({h.get('spool_records', 0)} records) · ",
        (f"dropped {h.get('dropped', 0)}", "bold red" if h.get("dropped") else ""),
    )
    for part, why in (h.get("degraded") or {}).items():
        text.append(f" · degraded {part}: {why}", style="bold red")
    return text


def render(snap: dict[str, Any], where: str) -> RenderableType:
    """The whole view of a board snapshot; ``where`` says what is followed."""
    parts: list[RenderableType] = [_header(snap, where)]
    not_connected = problem(snap.get("link"))
    if not_connected:
        parts.append(Text(not_connected, style="bold red"))
    parts += [
        _health(snap),
        _sources(snap),
        _recent(snap),
    ]
    if snap["errors"]:
        parts.append(_errors(snap))
    return Group(*parts)


def _plain_health(snap: dict[str, Any]) -> str:
    h = snap.get("health")
    if not h:
        return "health: none yet"
    broker = "connected" if h.get("broker_connected") else "not connected"
    degraded = "".join(f", degraded {p}: {w}" for p, w in (h.get("degraded") or {}).items())
    return (
        f"health: uptime {h.get('uptime_s', 0):.0f} s, broker {broker}, "
        f"outbox {h.get('outbox_depth', 0)}, spool {format_size(h.get('spool_bytes', 0))} "
        f"({counted(h.get('spool_records', 0), 'record')}), dropped {h.get('dropped', 0)}"
        + degraded
    )


def plain_lines(snap: dict[str, Any], where: str, errors_seen: int = 0) -> list[str]:
    """The view as plain lines for a log or a pipe, each starting with the time of day.

    The device, why the broker is not connected (while it is not), health, one line per
    source, then the error events after the first ``errors_seen`` (each is printed once).
    """
    now = time.strftime("%H:%M:%S")
    status = (snap.get("status") or {}).get("state")
    age = snap.get("last_message_age_s")
    head = f"{snap['device']} ({where}): {counted(snap['messages'], 'message')}"
    head += (f", {status}" if status else "") + (f", last {age:.1f} s ago" if age else "")
    not_connected = problem(snap.get("link"))
    lines = [head, *([not_connected] if not_connected else []), _plain_health(snap)]
    for name, s in snap["sources"].items():
        last = s["last"][-1] if s["last"] else None
        shown = "" if last is None else f", last {last['item'] or ''} {last.get('label') or ''}"
        lines.append(
            f"{name}: {s['rate_per_s']:.2f}/s, latency {_n(s['latency_ms'])} ms, "
            f"{counted(s['items'], 'item')}, {counted(s['windows'], 'window')}, "
            f"{counted(s['anomalies'], 'anomaly', 'anomalies')}, "
            f"{counted(s['errors'], 'error')}{shown.rstrip()}"
        )
    for e in snap["errors"][errors_seen:]:
        lines.append(
            f"error {e.get('source') or ''} {e.get('item') or ''} "
            f"{e.get('error_type') or ''}: {e.get('message') or ''}"
        )
    return [f"{now} {line}" for line in lines]
