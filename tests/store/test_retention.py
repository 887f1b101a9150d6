"""Retention ring: atomic files, bounds, keep policies, catalog rebuild, full disk."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import sqlite3
import threading
import time
import zipfile
from pathlib import Path

import pytest
from helpers.full_disk import small_tmpfs
from helpers.retention_data import make_window

from cdml_edge.config import parse_config
from cdml_edge.store.catalog import CATALOG_NAME
from cdml_edge.store.policy import sample_hit
from cdml_edge.store.retention import RetentionRing, StoreStatus
from cdml_edge.store.sidecar import list_retained, read_sidecar
from cdml_edge.window.manifest import (
    MANIFEST_NAME,
    ItemOutcome,
    ManifestError,
    WindowManifest,
)

T0 = 1_790_000_000.0


def _files(n: int, size: int = 200, seed: int = 0) -> list[tuple[str, bytes]]:
    return [(f"img{seed}_{i}.png", os.urandom(size)) for i in range(n)]


def test_manifest_roundtrip_and_errors() -> None:
    _, m = make_window("w1", T0, _files(2), labels=["ok", "defect"])
    assert WindowManifest.from_bytes(m.to_bytes()) == m
    assert m.to_bytes() == WindowManifest.from_bytes(m.to_bytes()).to_bytes()
    with pytest.raises(ManifestError, match="x.zip.*not JSON"):
        WindowManifest.from_bytes(b"{nope", where="x.zip")
    with pytest.raises(ManifestError, match="format_version"):
        WindowManifest.from_bytes(b'{"format_version": 99}')
    with pytest.raises(ManifestError, match="unknown item ids"):
        m.with_results({"nope": ItemOutcome(label="x")})


def test_store_keeps_the_very_bytes_and_results(tmp_path: Path) -> None:
    ring = RetentionRing(tmp_path / "ret", max_bytes=10**7)
    archive, m = make_window(
        "cam1-w1", T0, _files(3), labels=["ok", "defect", "ok"], anomaly_scores=[0.1, 0.9, 0.2]
    )
    bare = m.model_copy(update={"results": {}})
    res = ring.store(archive, bare, m.results)
    assert res.status is StoreStatus.STORED and res.file is not None
    assert res.file.read_bytes() == archive
    [rec] = ring.windows()
    assert rec.sha256 == hashlib.sha256(archive).hexdigest()
    assert rec.n_items == 3 and rec.n_anomalies == 1
    rw = ring.load(rec)
    assert rw.manifest.results == m.results
    assert rw.archive.sha256 == rec.sha256
    # the manifest inside the archive is the one the packer wrote (no results)
    with zipfile.ZipFile(io.BytesIO(res.file.read_bytes())) as zf:
        inner = WindowManifest.from_bytes(zf.read(MANIFEST_NAME))
    assert inner.results == {} and inner.items == m.items
    assert ring.catalog.label_counts() == {"defect": 1, "ok": 2}
    assert ring.stats()["stored"] == 1 and ring.stats()["bytes"] == rec.bytes
    names = sorted(p.name for p in (tmp_path / "ret").iterdir())
    assert names == sorted([rec.file, rec.sidecar, CATALOG_NAME])


def _mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def test_ring_files_are_owner_only_or_the_configured_mode(tmp_path: Path) -> None:
    """Archives, sidecars and the catalog hold the factory's images and labels: kept private.

    0600 by default whatever the umask, the folder the ring makes 0700; ``retention.mode`` widens.
    """
    old = os.umask(0o022)
    try:
        ring = RetentionRing(tmp_path / "ret", max_bytes=10**7)
        archive, m = make_window("w1", T0, _files(2), labels=["ok", "ok"])
        res = ring.store(archive, m)
        [rec] = ring.windows()
        assert res.file is not None and _mode(res.file) == 0o600
        assert _mode(tmp_path / "ret" / rec.sidecar) == 0o600
        assert _mode(tmp_path / "ret" / CATALOG_NAME) == 0o600
        assert _mode(tmp_path / "ret") == 0o700
        ring.close()
        cfg = parse_config(
            {
                "sources": [],
                "retention": {"dir": str(tmp_path / "shared"), "max_bytes": "1MiB", "mode": "0640"},
            }
        )
        assert cfg.retention is not None
        shared = RetentionRing.from_config(cfg.retention)
        res = shared.store(archive, m)
        assert res.file is not None and _mode(res.file) == 0o640
        assert _mode(tmp_path / "shared" / CATALOG_NAME) == 0o640
        assert _mode(tmp_path / "shared") == 0o750
        shared.close()
    finally:
        os.umask(old)


def test_max_bytes_evicts_oldest_first(tmp_path: Path) -> None:
    archives = [make_window(f"w{i}", T0 + i, _files(2, 2000, i)) for i in range(6)]
    probe = RetentionRing(tmp_path / "probe", max_bytes=10**7)
    probe.store(*archives[0])
    one = probe.windows()[0].bytes  # archive + sidecar; all six are the same size
    catalog = probe.stats()["catalog_bytes"]  # a few rows take no more pages than one
    ring = RetentionRing(tmp_path / "ring", max_bytes=3 * one + one // 2 + catalog)
    # stored out of order: eviction follows close time, not arrival
    for i in (1, 0, 2, 3, 4, 5):
        assert ring.store(*archives[i]).stored
    kept = [r.window_id for r in ring.windows()]
    assert kept == ["w3", "w4", "w5"]
    assert ring.stats()["bytes"] <= 3 * one
    assert ring.counters["evicted"] == 3
    left = {p.name for p in (tmp_path / "ring").iterdir()}
    assert not any("_w0." in n or "_w1." in n or "_w2." in n for n in left)


def test_max_age_evicts_old_windows(tmp_path: Path) -> None:
    now = [T0 + 100]
    ring = RetentionRing(tmp_path, max_bytes=10**8, max_age=50, clock=lambda: now[0])
    for i in range(4):
        ring.store(*make_window(f"w{i}", T0 + 40 * i, _files(1)))
    # w0 (age 100) already went while storing; w1 (age 60) too
    assert [r.window_id for r in ring.windows()] == ["w2", "w3"]
    now[0] = T0 + 200
    assert ring.evict() == 2
    assert ring.windows() == []


def test_too_large_is_not_kept(tmp_path: Path) -> None:
    ring = RetentionRing(tmp_path, max_bytes=10**7)
    # a small window takes two blocks; the catalog (never evicted) its own room beside them
    ring.max_bytes = 20_000 + ring.stats()["catalog_bytes"]
    ring.store(*make_window("small", T0, _files(1, 100)))
    res = ring.store(*make_window("big", T0 + 1, _files(1, 50_000)))
    assert res.status is StoreStatus.TOO_LARGE
    assert [r.window_id for r in ring.windows()] == ["small"]  # nothing evicted for it


def test_keep_policies(tmp_path: Path) -> None:
    quiet = make_window("quiet", T0, _files(2), labels=["ok", "ok"], anomaly_scores=[0.1, 0.2])
    loud = make_window("loud", T0 + 1, _files(2), labels=["ok", "x"], anomaly_scores=[0.1, 0.9])
    ring = RetentionRing(tmp_path / "a", max_bytes=10**7, keep="anomalies")
    assert ring.store(*quiet).status is StoreStatus.SKIPPED
    assert ring.store(*loud).stored
    assert [r.window_id for r in ring.windows()] == ["loud"]
    none = RetentionRing(tmp_path / "n", max_bytes=10**7, keep="none")
    assert none.store(*loud).status is StoreStatus.SKIPPED
    sample = RetentionRing(tmp_path / "s", max_bytes=10**9, keep="sample", sample_percent=25)
    ids = [f"cam1-{i}" for i in range(2000)]
    hits = [i for i in ids if sample_hit(i, 25)]
    assert 400 < len(hits) < 600
    assert hits == [i for i in ids if sample_hit(i, 25)]  # deterministic
    kept = 0
    for i in ids[:40]:
        if sample.store(*make_window(i, T0, _files(1, 10))).stored:
            kept += 1
    assert kept == sum(sample_hit(i, 25) for i in ids[:40])


def test_from_config(tmp_path: Path) -> None:
    cfg = parse_config(
        {"retention": {"dir": "ret", "max_bytes": "1MiB", "max_age": "7d", "keep": "anomalies"}},
        base_dir=tmp_path,
    )
    assert cfg.retention is not None
    ring = RetentionRing.from_config(cfg.retention)
    assert ring.dir == tmp_path / "ret" and ring.max_bytes == 1024**2
    assert ring.max_age == 7 * 86400 and ring.keep == "anomalies"


def test_catalog_rebuilt_when_lost_or_corrupt(tmp_path: Path) -> None:
    ring = RetentionRing(tmp_path, max_bytes=10**7)
    for i in range(3):
        ring.store(*make_window(f"w{i}", T0 + i, _files(2), labels=["ok", "bad"]))
    before = ring.windows()
    labels = ring.catalog.label_counts()
    ring.close()
    for p in tmp_path.glob(CATALOG_NAME + "*"):
        p.unlink()
    again = RetentionRing(tmp_path, max_bytes=10**7)
    assert again.catalog.rebuilt_reason == "missing"
    assert again.windows() == before and again.catalog.label_counts() == labels
    again.close()
    for p in tmp_path.glob(CATALOG_NAME + "-*"):
        p.unlink()
    (tmp_path / CATALOG_NAME).write_bytes(b"this is not a database" * 100)
    third = RetentionRing(tmp_path, max_bytes=10**7)
    assert third.catalog.rebuilt_reason is not None
    assert third.catalog.rebuilt_reason.startswith("unreadable")
    assert third.windows() == before
    assert third.rebuild_catalog() == 3 and third.windows() == before


def test_reconcile_removes_debris_and_stale_rows(tmp_path: Path) -> None:
    ring = RetentionRing(tmp_path, max_bytes=10**7)
    for i in range(3):
        ring.store(*make_window(f"w{i}", T0 + i, _files(1)))
    recs = ring.windows()
    ring.close()
    (tmp_path / ".tmp-20300101T000000.000Z_half.zip").write_bytes(b"partial")
    (tmp_path / "20300101T000000.000Z_orphan.zip").write_bytes(b"no sidecar")  # crash mid-store
    (tmp_path / recs[1].file).unlink()  # archive lost: the window is gone
    (tmp_path / "20300101T000000.000Z_bad.window.json").write_bytes(b"{broken")
    ring = RetentionRing(tmp_path, max_bytes=10**7)
    assert [r.window_id for r in ring.windows()] == ["w0", "w2"]
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(CATALOG_NAME))
    kept = [recs[0].file, recs[0].sidecar, recs[2].file, recs[2].sidecar]
    assert left == sorted([*kept, "corrupt"])  # a damaged sidecar is kept aside, not deleted
    assert [p.name for p in (tmp_path / "corrupt").iterdir()] == [
        "20300101T000000.000Z_bad.window.json"
    ]


def test_the_ring_owns_only_what_it_wrote(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Foreign files in the retention folder are never read, moved or deleted.

    An export, notes, a link, a folder or a file that merely ends like a sidecar; they are listed
    and logged once.
    """
    ring = RetentionRing(tmp_path, max_bytes=10**7)
    ring.store(*make_window("w0", T0, _files(1)))
    ring.close()
    foreign = {
        "train.zip": b"PK export written here by a user",
        "old.tar.zst": b"\x28\xb5\x2f\xfd not ours",
        "notes.window.json": b"{not a sidecar",
        ".tmp-user-upload.zip": b"someone else's temporary file",
        "2030_w9.zip": b"close to our pattern, not it",
    }
    for name, data in foreign.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "exports").mkdir()
    (tmp_path / "link.zip").symlink_to("/etc/hostname")
    with caplog.at_level("WARNING", logger="cdml_edge.store.retention"):
        ring = RetentionRing(tmp_path, max_bytes=10**7)
        ring.rebuild_catalog()
    assert sorted(ring.foreign) == sorted([*foreign, "exports", "link.zip"])
    for name, data in foreign.items():
        assert (tmp_path / name).read_bytes() == data
    assert (tmp_path / "link.zip").is_symlink() and not (tmp_path / "corrupt").exists()
    assert [r.window_id for r in ring.windows()] == ["w0"]
    lines = [r.getMessage() for r in caplog.records if "left alone" in r.getMessage()]
    assert len(lines) == 2 and "7 entries" in lines[0] and "and 2 more" in lines[0]
    # eviction never touches them either
    ring.max_bytes = 1
    ring.evict()
    assert ring.windows() == []
    assert all((tmp_path / name).exists() for name in foreign)
    assert list_retained(tmp_path) == []


def test_concurrent_stores(tmp_path: Path) -> None:
    ring = RetentionRing(tmp_path, max_bytes=10**8, fsync=False)
    wins = [make_window(f"w{i:03d}", T0 + i, _files(2, 100, i)) for i in range(40)]

    def worker(k: int) -> None:
        for w in wins[k::4]:
            assert ring.store(*w).stored

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.window_id for r in ring.windows()] == [f"w{i:03d}" for i in range(40)]


def test_enospc_injected_gives_event_and_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    ring = RetentionRing(
        tmp_path, max_bytes=10**7, on_event=lambda k, i: events.append((k, i)), retry_s=0
    )
    assert ring.store(*make_window("w0", T0, _files(1))).stored
    real_write = os.write

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    r1 = ring.store(*make_window("w1", T0 + 1, _files(1)))
    r2 = ring.store(*make_window("w2", T0 + 2, _files(1)))
    assert r1.status is StoreStatus.DISK_FULL and r2.status is StoreStatus.DISK_FULL
    assert r1.event == "retention_disk_full" and r2.event is None
    assert ring.counters["disk_full"] == 2
    assert [k for k, _ in events] == ["retention_disk_full"]  # once per episode
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())
    monkeypatch.setattr(os, "write", real_write)
    r3 = ring.store(*make_window("w3", T0 + 3, _files(1)))
    assert r3.stored and r3.event == "retention_disk_ok"
    assert [k for k, _ in events] == ["retention_disk_full", "retention_disk_ok"]
    assert [r.window_id for r in ring.windows()] == ["w0", "w3"]
    ring.close()


def test_an_idle_ring_is_not_left_degraded_once_the_disk_has_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window comes after the failed one (a quiet line): the ring probes its disk."""
    events: list[str] = []
    ring = RetentionRing(
        tmp_path, max_bytes=10**7, on_event=lambda k, i: events.append(k), retry_s=0.05
    )
    real_write = os.write

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    assert ring.store(*make_window("w1", T0, _files(1))).status is StoreStatus.DISK_FULL
    monkeypatch.setattr(os, "write", real_write)
    deadline = time.monotonic() + 5
    while ring.degraded is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ring.degraded is None and events == ["retention_disk_full", "retention_disk_ok"]
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())
    assert ring.foreign == [] and ring.faults.probes >= 1
    ring.close()


def test_other_errors_never_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ring = RetentionRing(tmp_path, max_bytes=10**7, on_event=lambda k, i: 1 / 0)

    def broken(*a: object, **k: object) -> None:
        raise PermissionError(errno.EACCES, "denied")

    monkeypatch.setattr(os, "replace", broken)
    res = ring.store(*make_window("w1", T0, _files(1)))
    assert res.status is StoreStatus.FAILED and "PermissionError" in (res.error or "")
    assert ring.counters["failed"] == 1
    ring.close()


@pytest.fixture
def tiny_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    with small_tmpfs(tmp_path / "tiny", "256k") as mnt:
        yield mnt


def test_enospc_on_a_real_full_filesystem(tiny_fs: Path) -> None:
    events: list[str] = []
    # the ring believes it may hold 100 MB; the file system holds 256 KiB
    ring = RetentionRing(
        tiny_fs, max_bytes=10**8, on_event=lambda k, i: events.append(k), retry_s=0
    )
    statuses = [
        ring.store(*make_window(f"w{i:02d}", T0 + i, _files(2, 20_000, i))).status
        for i in range(12)
    ]
    assert StoreStatus.STORED in statuses and StoreStatus.DISK_FULL in statuses
    assert ring.counters["disk_full"] == statuses.count(StoreStatus.DISK_FULL)
    assert events[0] == "retention_disk_full"
    # every catalogued window is complete and readable; no half-written files remain
    for rec in ring.windows():
        assert hashlib.sha256((tiny_fs / rec.file).read_bytes()).hexdigest() == rec.sha256
        read_sidecar(tiny_fs / rec.sidecar)
    assert not any(p.name.startswith(".tmp-") for p in tiny_fs.iterdir())
    # make room (a smaller bound evicts the oldest) and the ring recovers
    ring.max_bytes = 50_000
    assert ring.evict() >= 1
    assert ring.store(*make_window("after", T0 + 99, _files(1, 100))).stored
    assert events[-1] == "retention_disk_ok"
    ring.close()


def _disk_space(folder: Path) -> int:
    """What the ring's files take on the disk (blocks), its catalog included."""
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def test_max_bytes_bounds_the_disk_space_of_many_small_windows(tmp_path: Path) -> None:
    """Small windows take whole blocks: the bound counts blocks, not file lengths.

    A window of one 300-byte item is about 1.5 KiB of archive and sidecar, but two files of
    a block each (8 KiB on most file systems). Counted by length, a 64 KiB ring filled 3-5x
    its bound on disk (the soak's tmpfs filled up and stayed full). The catalog counts too:
    36 KiB beside such a ring of 64 KiB.
    """
    bound = 64 * 1024
    ring = RetentionRing(tmp_path / "ring", max_bytes=bound)
    for i in range(60):
        assert ring.store(*make_window(f"w{i:02d}", T0 + i, _files(1, 300, i))).stored
        assert _disk_space(tmp_path / "ring") <= bound
    stats = ring.stats()
    assert stats["bytes"] + stats["catalog_bytes"] <= bound
    assert stats["bytes"] + stats["catalog_bytes"] >= _disk_space(tmp_path / "ring")
    counted = ring.stats()["bytes"]
    ring.close()
    (tmp_path / "ring" / CATALOG_NAME).unlink()
    rebuilt = RetentionRing(tmp_path / "ring", max_bytes=bound)  # rows from the sidecars
    assert rebuilt.stats()["bytes"] == counted
    rebuilt.close()


def test_too_large_says_the_window_takes_more_blocks_than_the_bound(tmp_path: Path) -> None:
    """A 1.5 KiB window under a 5000-byte bound: refused, and the error says why in figures."""
    ring = RetentionRing(tmp_path, max_bytes=5000)
    archive, manifest = make_window("small", T0, _files(1, 300))
    res = ring.store(archive, manifest)
    assert res.status is StoreStatus.TOO_LARGE and res.error is not None
    assert f"{2 * ring.block} B on the disk" in res.error
    assert f"{len(archive)} B archive" in res.error and f"{ring.block} B blocks" in res.error
    assert "retention.max_bytes (5000)" in res.error
    ring.close()


def test_a_ring_over_its_bound_when_opened_is_brought_within_it(tmp_path: Path) -> None:
    """An old catalog (schema 1: lengths) is rebuilt counting blocks: over the bound at once.

    The ring is evicted to its bound when it is opened, not left over it (and the disk full
    beside it) until a window comes, which may be long with ``keep: anomalies``.
    """
    ring_dir = tmp_path / "ring"
    ring = RetentionRing(ring_dir, max_bytes=10 * 1024**2)
    for i in range(30):
        assert ring.store(*make_window(f"w{i:02d}", T0 + i, _files(1, 300, i))).stored
    ring.close()
    with sqlite3.connect(ring_dir / CATALOG_NAME) as db:  # as the previous release left it
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.close()
    bound = 64 * 1024
    reopened = RetentionRing(ring_dir, max_bytes=bound)
    assert reopened.catalog.rebuilt_reason == "schema version 1"
    assert 0 < reopened.stats()["bytes"] <= bound and _disk_space(ring_dir) <= bound
    assert reopened.stats()["evicted"] > 0
    assert [r.window_id for r in reopened.windows()][-1] == "w29"  # the oldest went
    reopened.close()


def test_a_window_too_large_for_the_ring_is_said_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bound smaller than every window keeps nothing: a warning says so, not one per window."""
    now = [T0]
    ring = RetentionRing(tmp_path, max_bytes=4096, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="cdml_edge.store.retention"):
        for i in range(5):
            res = ring.store(*make_window(f"w{i}", T0 + i, _files(1, 100, i)))
            assert res.status is StoreStatus.TOO_LARGE
        now[0] += 61
        ring.store(*make_window("w9", T0 + 9, _files(1, 100, 9)))
    lines = [r.getMessage() for r in caplog.records if "not kept" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "w0" in lines[0] and "retention.max_bytes (4096)" in lines[0]
    assert "w9" in lines[1] and "5 windows too large since" in lines[1]
    assert ring.counters["too_large"] == 6
    ring.close()
