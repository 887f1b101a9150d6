"""The ring trusts nothing on its disk: links, FIFOs, devices and hostile catalog rows.

Every test builds a real ring, then puts the hostile entry in place the way a copied or
tampered ring would have it, and opens, stores into, evicts and lists the ring again.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.retention_data import make_window

from cdml_edge.store.catalog import CATALOG_NAME
from cdml_edge.store.retention import RetentionRing
from cdml_edge.store.sidecar import RetentionError, list_retained, read_sidecar, scan_retained

T0 = 1_790_000_000.0
OLD = 1_000_000_000  # an mtime far older than any max_age


def _ring_with(d: Path, n: int) -> list[str]:
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    for i in range(n):
        assert ring.store(*make_window(f"w{i}", T0 + i, [("a.jpg", b"x" * 100)])).stored
    ring.close()
    return sorted(p.name for p in d.glob("*.window.json"))


def _elsewhere(tmp_path: Path, n: int = 3) -> Path:
    other = tmp_path / "elsewhere"
    other.mkdir()
    for i in range(n):
        p = other / f"precious{i}.bin"
        p.write_bytes(b"keep me")
        os.utime(p, (OLD, OLD))
    return other


def _within(seconds: float, fn: Callable[[], object]) -> object:
    """Run ``fn`` in a thread; fail (not hang) when it does not return within ``seconds``."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_corrupt_folder_linked_elsewhere_is_never_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``<ring>/corrupt -> elsewhere/`` with max_age: nothing in elsewhere/ is deleted."""
    d = tmp_path / "ring"
    [sc0, _sc1] = _ring_with(d, 2)
    other = _elsewhere(tmp_path)
    (d / "corrupt").symlink_to(other, target_is_directory=True)
    (d / sc0).write_bytes(b"{damaged")  # a damaged sidecar whose archive is damaged too
    (d / sc0.replace(".window.json", ".zip")).write_bytes(b"PK not a zip")
    with caplog.at_level("WARNING"):
        ring = RetentionRing(d, max_bytes=10**7, max_age=60.0, fsync=False)
        ring.rebuild_catalog()
        res = ring.store(*make_window("w9", time.time(), [("b.jpg", b"y" * 100)]))
        ring.evict()
        stats = ring.stats()
        ring.close()
    assert res.stored
    assert sorted(p.name for p in other.iterdir()) == [f"precious{i}.bin" for i in range(3)]
    assert (d / sc0).read_bytes() == b"{damaged"  # not moved through the link
    assert (d / "corrupt").is_symlink()
    assert stats["corrupt_bytes"] == 0
    assert any("corrupt" in r.getMessage() and "link" in r.getMessage() for r in caplog.records)


def test_files_inside_corrupt_that_are_links_are_not_followed(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    _ring_with(d, 1)
    other = _elsewhere(tmp_path, 1)
    (d / "corrupt").mkdir()
    (d / "corrupt" / "x.window.json").symlink_to(other / "precious0.bin")
    ring = RetentionRing(d, max_bytes=10**7, max_age=60.0, fsync=False)
    ring.evict()
    ring.close()
    assert (other / "precious0.bin").read_bytes() == b"keep me"


@pytest.mark.parametrize("which", ["sidecar", "archive"])
def test_a_ring_file_linked_to_dev_zero_is_never_read(tmp_path: Path, which: str) -> None:
    d = tmp_path / "ring"
    [sc] = _ring_with(d, 1)
    target = d / (sc if which == "sidecar" else sc.replace(".window.json", ".zip"))
    target.unlink()
    target.symlink_to("/dev/zero")
    for p in d.glob(CATALOG_NAME + "*"):
        p.unlink()
    listing = _within(20, lambda: scan_retained(d))
    assert listing.records == [] and len(listing.skipped) == 1  # type: ignore[attr-defined]
    if which == "sidecar":
        with pytest.raises(RetentionError, match="symbolic link"):
            read_sidecar(d / sc)
    ring = _within(20, lambda: RetentionRing(d, max_bytes=10**7, fsync=False))
    assert isinstance(ring, RetentionRing)
    # a sidecar is rebuilt from its (genuine) archive; a window without its archive is not kept
    expected = ["w0"] if which == "sidecar" else []
    assert [r.window_id for r in ring.windows()] == expected
    ring.close()
    assert (d / "corrupt" / target.name).is_symlink()  # moved aside as the link itself


@pytest.mark.parametrize("which", ["sidecar", "archive", "catalog"])
def test_a_fifo_in_the_ring_never_hangs(tmp_path: Path, which: str) -> None:
    d = tmp_path / "ring"
    [sc] = _ring_with(d, 1)
    name = {
        "sidecar": sc,
        "archive": sc.replace(".window.json", ".zip"),
        "catalog": CATALOG_NAME,
    }[which]
    (d / name).unlink()
    os.mkfifo(d / name)
    if which != "catalog":
        for p in d.glob(CATALOG_NAME + "*"):
            p.unlink()
    try:
        listing = _within(20, lambda: scan_retained(d))
        ring = _within(20, lambda: RetentionRing(d, max_bytes=10**7, fsync=False))
        assert isinstance(ring, RetentionRing)
        ring.close()
    finally:  # a reader stuck on the FIFO is released, whatever happened
        with contextlib.suppress(OSError):
            os.close(os.open(d / name, os.O_WRONLY | os.O_NONBLOCK))
    if which == "catalog":
        assert [r.window_id for r in listing.records] == ["w0"]  # type: ignore[attr-defined]
    else:
        assert listing.records == []  # type: ignore[attr-defined]


def test_a_catalog_linked_elsewhere_is_never_written_through(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    _ring_with(d, 1)
    other = tmp_path / "elsewhere.sqlite"
    other.write_bytes(b"not yours")
    (d / CATALOG_NAME).unlink()
    (d / CATALOG_NAME).symlink_to(other)
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    assert ring.store(*make_window("w5", T0 + 5, [("c.jpg", b"z" * 100)])).stored
    assert sorted(r.window_id for r in ring.windows()) == ["w0", "w5"]
    ring.close()
    assert other.read_bytes() == b"not yours"
    assert not (d / CATALOG_NAME).is_symlink()


def _tamper_catalog(d: Path, sql: str, *args: object) -> None:
    conn = sqlite3.connect(d / CATALOG_NAME)
    conn.execute(sql, args)
    conn.commit()
    conn.close()


def test_catalog_rows_pointing_outside_never_delete_genuine_windows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows whose archive lies outside the ring but whose sidecar names a genuine window."""
    d = tmp_path / "ring"
    names = _ring_with(d, 3)
    victim = tmp_path / "victim.zip"
    victim.write_bytes(b"PK victim")
    for i, sc in enumerate(names[:2]):
        _tamper_catalog(
            d,
            "INSERT INTO windows VALUES (?, 'cam1', 'edge-1', NULL, 'image', 0, 0, 1, 0, NULL,"
            " NULL, ?, ?, 10, 'x')",
            f"evil{i}",
            "../victim.zip" if i == 0 else str(victim),
            sc,
        )
    with caplog.at_level("WARNING"):
        ring = RetentionRing(d, max_bytes=10**7, max_age=10 * 365 * 86400.0, fsync=False)
        ring.evict()
        ring.reconcile()
        ids = sorted(r.window_id for r in ring.windows())
        ignored = ring.ignored_rows
        ring.close()
    assert ids == ["w0", "w1", "w2"]
    assert sorted(p.name for p in d.glob("*.window.json")) == names
    assert len(list(d.glob("*.zip"))) == 3
    assert victim.read_bytes() == b"PK victim"
    assert ignored == 2
    assert any("outside the ring" in r.getMessage() for r in caplog.records)


def test_list_retained_reports_what_it_skips(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    [sc0, sc1] = _ring_with(d, 2)
    doc = json.loads((d / sc0).read_bytes())
    doc["archive"]["file"] = "../outside.zip"
    (d / sc0).write_text(json.dumps(doc))
    for p in d.glob(CATALOG_NAME + "*"):
        p.unlink()
    listing = scan_retained(d)
    assert [r.sidecar for r in listing.records] == [sc1]
    [(name, reason)] = listing.skipped
    assert name == sc0 and "outside.zip" in reason
    assert [r.sidecar for r in list_retained(d)] == [sc1]


def test_a_folder_where_the_catalog_goes_is_a_typed_error(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    _ring_with(d, 1)
    (d / CATALOG_NAME).unlink()
    (d / CATALOG_NAME).mkdir()
    (d / CATALOG_NAME / "keep.txt").write_text("someone's")
    with pytest.raises(RetentionError, match="a folder where the catalog goes"):
        RetentionRing(d, max_bytes=10**7, fsync=False)
    assert (d / CATALOG_NAME / "keep.txt").read_text() == "someone's"


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_the_ring_never_writes_through_a_temporary_name_put_there(
    tmp_path: Path, kind: str
) -> None:
    """A link (or FIFO) where the ring writes a window's temporary file: never written through."""
    d = tmp_path / "ring"
    ring = RetentionRing(d, max_bytes=10**7, fsync=False)
    victim = tmp_path / "victim.txt"
    victim.write_text("important")
    archive, m = make_window("w7", T0 + 7, [("a.jpg", b"x" * 100)])
    from cdml_edge.store.sidecar import window_stem

    tmp = d / f".tmp-{window_stem(m)}.zip"
    if kind == "link":
        tmp.symlink_to(victim)
    else:
        os.mkfifo(tmp)
    res = _within(20, lambda: ring.store(archive, m))
    ring.close()
    assert victim.read_text() == "important"
    assert res.stored  # type: ignore[attr-defined]  # the entry was removed, not followed
