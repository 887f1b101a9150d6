"""Retention ring integrity: damaged or hostile sidecars never lose or reach other files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import pytest
from helpers.retention_data import make_window

from cdml_edge.fsio import on_disk
from cdml_edge.store.catalog import CATALOG_NAME
from cdml_edge.store.retention import RetentionRing
from cdml_edge.store.sidecar import list_retained

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


def test_damaged_sidecar_is_rebuilt_from_the_archive_manifest(tmp_path: Path) -> None:
    d, [sc0, sc1] = _ring_with(tmp_path, 2)
    archive0 = (d / sc0.replace(".window.json", ".zip")).read_bytes()
    damaged = (d / sc0).read_bytes()[:-3]
    (d / sc0).write_bytes(damaged)
    _drop_catalog(d)
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    assert [r.window_id for r in ring.windows()] == ["w0", "w1"]
    assert ring.counters["rebuilt"] == 1 and ring.counters["corrupt"] == 0
    rec0 = ring.windows()[0]
    rw = ring.load(rec0)
    assert rw.results_lost and rw.manifest.results == {} and rw.manifest.window_id == "w0"
    assert rw.archive.sha256 == hashlib.sha256(archive0).hexdigest()
    assert ring.archive_path(rec0).read_bytes() == archive0
    assert (d / "corrupt" / sc0).read_bytes() == damaged
    assert not ring.load(ring.windows()[1]).results_lost
    assert ring.stats()["corrupt_bytes"] == on_disk(len(damaged), ring.block)
    ring.close()


def test_damaged_pair_is_quarantined_and_counted_toward_max_bytes(tmp_path: Path) -> None:
    d, [sc0, sc1] = _ring_with(tmp_path, 2)
    zip0 = sc0.replace(".window.json", ".zip")
    (d / sc0).write_bytes((d / sc0).read_bytes()[:-3])
    (d / zip0).write_bytes((d / zip0).read_bytes()[:40])  # the archive is damaged too
    kept = {n: (d / n).read_bytes() for n in (sc0, zip0)}
    _drop_catalog(d)
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    assert [r.window_id for r in ring.windows()] == ["w1"]
    assert ring.counters["corrupt"] == 1 and ring.counters["rebuilt"] == 0
    assert {p.name: p.read_bytes() for p in (d / "corrupt").iterdir()} == kept
    assert ring.stats()["corrupt_bytes"] == sum(on_disk(len(b), ring.block) for b in kept.values())
    one = ring.windows()[0].bytes
    catalog = ring.stats()["catalog_bytes"]  # the bound holds the catalog too
    ring.close()
    # the quarantine counts toward max_bytes and ages out like a window
    old = T0 - 100
    for p in (d / "corrupt").iterdir():
        os.utime(p, (old, old))
    tight = RetentionRing(d, max_bytes=one + catalog + 1, fsync=False)
    assert tight.evict() == 0
    assert not any((d / "corrupt").iterdir()) and tight.counters["corrupt_evicted"] == 2
    assert [r.window_id for r in tight.windows()] == ["w1"]
    tight.close()


def test_a_crash_while_a_sidecar_is_rebuilt_loses_no_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The damaged sidecar was moved to ``corrupt/`` before the rebuilt one was committed.

    A crash between the two left the archive without a sidecar, and the next open deleted
    it as an archive whose window never committed. The commit is cut here (an ``OSError``
    where the process would have died), then the ring is opened again.
    """
    import cdml_edge.store.repair as repair

    d, [sc0, _sc1] = _ring_with(tmp_path, 2)
    zip0 = sc0.replace(".window.json", ".zip")
    archive0 = (d / zip0).read_bytes()
    (d / sc0).write_bytes((d / sc0).read_bytes()[:-3])
    _drop_catalog(d)

    def crash(*_args: object, **_kw: object) -> None:
        raise OSError("the power went")

    monkeypatch.setattr(repair, "commit", crash)
    with contextlib.suppress(OSError):  # the open may report it or go on without the window
        RetentionRing(d, max_bytes=10**7, fsync=False).close()
    monkeypatch.undo()
    assert (d / zip0).exists()
    _drop_catalog(d)
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    assert [r.window_id for r in ring.windows()] == ["w0", "w1"]
    assert ring.archive_path(ring.windows()[0]).read_bytes() == archive0
    ring.close()
