"""The status page: one HTML document rendered on the server from the activity board.

No script, no build step, nothing fetched from elsewhere (the box is offline): styles are
inline, thumbnails are ``data:`` URIs, the sparkline is inline SVG, and the page reloads
itself every ``REFRESH_S`` seconds (``<meta http-equiv="refresh">``). Every text from a
payload is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Callable, Sequence
from typing import Any

from cdml_edge.fsio import display_name

REFRESH_S = 2
SPARK_W, SPARK_H = 240, 40

#: what the page allows the browser to load: inline styles and data: images, nothing else
CONTENT_SECURITY_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

Thumbnail = Callable[[str, str], bytes | None]

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#f6f7f9}
h1{font-size:20px;margin:0 0 .3em}h2{font-size:16px;margin:1.2em 0 .4em}
.muted{color:#667}.badge{padding:2px 8px;border-radius:9px;color:#fff;font-weight:600}
.ok{background:#1a7f37}.bad{background:#c62828}
.card{background:#fff;border:1px solid #dde;border-radius:8px;padding:12px;margin:0 0 12px}
table{border-collapse:collapse}td,th{padding:3px 10px 3px 0;text-align:left;vertical-align:middle}
th{font-weight:600;color:#445}.anomaly td{background:#fde7e7}
.stats span{margin-right:18px}.stats b{font-size:16px}
img.thumb{width:48px;height:48px;object-fit:cover;border-radius:4px;display:block}
svg.spark{background:#fafbfc;border:1px solid #eef}
"""


def _e(value: Any) -> str:
    """``value`` as HTML text; a list as its items, raw bytes of a name as ``%XX``."""
    if isinstance(value, list | tuple):
        value = ", ".join(map(str, value))
    return html.escape(display_name("" if value is None else str(value)))


def _num(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def sparkline(values: Sequence[float], width: int = SPARK_W, height: int = SPARK_H) -> str:
    """An inline SVG polyline of ``values`` (scaled to their range)."""
    if not values:
        return f'<svg class="spark" width="{width}" height="{height}"></svg>'
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    step = width / max(1, len(values) - 1)
    pts = " ".join(
        f"{i * step:.1f},{height - 3 - (v - lo) / span * (height - 6):.1f}"
        for i, v in enumerate(values)
    )
    return (
        f'<svg class="spark" width="{width}" height="{height}" role="img" '
        f'aria-label="scores {lo:.3g} to {hi:.3g}"><polyline fill="none" stroke="#3563c9" '
        f'stroke-width="1.5" points="{pts}"/></svg>'
    )


def _thumb(source: str, item: str, thumbs: Thumbnail) -> str:
    data = thumbs(source, item)
    if not data:
        return ""
    b64 = base64.b64encode(data).decode()
    return f'<img class="thumb" alt="{_e(item)}" src="data:image/jpeg;base64,{b64}">'


def _results(source: str, last: list[dict[str, Any]], thumbs: Thumbnail) -> str:
    rows = []
    for r in reversed(last):
        cls = ' class="anomaly"' if r.get("anomaly") else ""
        rows.append(
            f"<tr{cls}><td>{_thumb(source, r.get('item') or '', thumbs)}</td>"
            f"<td>{_e(r.get('item'))}</td><td>{_e(r.get('label'))}</td>"
            f"<td>{_num(r.get('score'), 3)}</td><td>{_num(r.get('anomaly_score'), 3)}</td>"
            f"<td>{'anomaly' if r.get('anomaly') else ''}</td>"
            f"<td>{_num(r.get('latency_ms'))} ms</td></tr>"
        )
    head = (
        "<tr><th></th><th>item</th><th>label</th><th>score</th><th>anomaly score</th>"
        "<th></th><th>latency</th></tr>"
    )
    return f'<table class="results">{head}{"".join(rows)}</table>'


def _source_card(name: str, s: dict[str, Any], thumbs: Thumbnail) -> str:
    camera = f"<span>camera <b>{_e(s['camera'])}</b></span>" if s.get("camera") else ""
    return (
        f'<div class="card source" id="source-{_e(name)}"><h2>{_e(name)}</h2>'
        f'<div class="stats"><span><b>{s["rate_per_s"]:.2f}</b>/s</span>'
        f"<span>latency <b>{_num(s['latency_ms'])}</b> ms</span>"
        f"<span>window <b>{_num(s['window_ms'])}</b> ms</span>"
        f"<span>items <b>{s['items']}</b></span><span>windows <b>{s['windows']}</b></span>"
        f"<span>anomalies <b>{s['anomalies']}</b></span>"
        f"<span>errors <b>{s['errors']}</b></span>{camera}</div>"
        f"<p>{sparkline(s['scores'])}</p>{_results(name, s['last'], thumbs)}</div>"
    )


def _errors(errors: list[dict[str, Any]]) -> str:
    if not errors:
        return '<p class="muted">none</p>'
    rows = "".join(
        f"<tr><td>{time.strftime('%H:%M:%S', time.localtime(e.get('ts') or 0))}</td>"
        f"<td>{_e(e.get('source'))}</td><td>{_e(e.get('item'))}</td>"
        f"<td>{_e(e.get('error_type'))}</td><td>{_e(e.get('message'))}</td></tr>"
        for e in reversed(errors)
    )
    return (
        '<table class="errors"><tr><th>time</th><th>source</th><th>item</th>'
        f"<th>error</th><th>message</th></tr>{rows}</table>"
    )


HEALTH_KEYS = (
    "uptime_s",
    "broker_connected",
    "outbox_depth",
    "spool_bytes",
    "spool_records",
    "dropped",
    "bytes_written",
    "thread_deaths",
)


def _health(healthz: dict[str, Any], last: dict[str, Any] | None) -> str:
    cells = [
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>"
        for k, v in healthz.items()
        if k != "status" and not isinstance(v, dict)
    ]
    for k in HEALTH_KEYS:
        if last is not None and k in last and k not in healthz:
            cells.append(f"<tr><th>{_e(k)}</th><td>{_e(last[k])}</td></tr>")
    for part, why in (healthz.get("degraded") or {}).items():
        cells.append(f"<tr><th>degraded: {_e(part)}</th><td>{_e(why)}</td></tr>")
    return f'<table class="health">{"".join(cells)}</table>'


def render_page(
    snapshot: dict[str, Any], healthz: dict[str, Any], thumbs: Thumbnail, version: str = ""
) -> str:
    """The whole page for a board ``snapshot`` and the ``/healthz`` body."""
    status = healthz.get("status", "ok")
    badge = "ok" if status == "ok" else "bad"
    cards = "".join(_source_card(n, s, thumbs) for n, s in snapshot["sources"].items())
    cards = cards or '<p class="muted">no results yet</p>'

    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        f"<title>cdml-edge {_e(snapshot['device'])}</title><style>{STYLE}</style></head><body>"
        f'<h1>cdml-edge <span class="muted">{_e(snapshot["device"])}</span> '
        f'<span class="badge {badge}" id="status">{_e(status)}</span></h1>'
        f'<p class="muted">version {_e(version)} · {snapshot["messages"]} messages · '
        f"read-only, refreshes every {REFRESH_S} s</p>"
        f"{cards}"
        f'<div class="card"><h2>Recent errors</h2>{_errors(snapshot["errors"])}</div>'
        f'<div class="card"><h2>Health</h2>{_health(healthz, snapshot["health"])}</div>'
        "</body></html>"
    )
