"""Retention ring integrity: damaged or hostile sidecars never lose or reach other files."""

from __future__ import annotations

import json
from pathlib import Path

from _retention_data import make_window

from cdml_edge.agent.catalog import CATALOG_NAME
from cdml_edge.agent.retention import RetentionRing, list_retained

T0 = 1_790_000_000.0


def _ring_with(tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    d = tmp_path / "ring"
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    for i in range(n):
        assert ring.store(*make_window(f"w{i}", T0 + i, [("a.jpg", b"x" * 100)])).stored
    ring.close()
    return d, sorted(p.name for p in d.glob("*.window.json"))


def _drop_catalog(d: Path) -> None:
    for p in d.glob(CATALOG_NAME + "*"):
        p.unlink()


def test_sidecar_pointing_outside_the_ring_never_deletes_there(tmp_path: Path) -> None:
    d, [sc] = _ring_with(tmp_path, 1)
    victim = tmp_path / "victim.txt"
    victim.write_text("important")
    doc = json.loads((d / sc).read_bytes())
    for bad in ("../victim.txt", str(victim), "other.zip"):
        doc["archive"]["file"] = bad
        (d / sc).write_text(json.dumps(doc))
        _drop_catalog(d)
        assert all(r.file != bad for r in list_retained(d))
        ring = RetentionRing(d, max_bytes=10**7, max_age=1.0, fsync=False)
        assert all(r.file != bad for r in ring.windows())
        ring.evict()
        ring.close()
        assert victim.read_text() == "important", bad
