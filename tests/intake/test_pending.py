"""The folder source's memory of files is bounded.

Pending files by ``max_pending``; files kept after their window (``on_done: keep``, or held for
the ring) by what is in the folder (the kept-file record, see ``test_big_folder.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdml_edge.intake.pending import PendingFiles


def _kept(pf: PendingFiles, path: Path) -> None:
    st = os.stat(path)
    pf.notice(str(path), st, closed=True, writing=False)
    pf.taken(str(path), _ident(st))
    pf.release(str(path), keep=True)


def _ident(st: os.stat_result):  # type: ignore[no-untyped-def]
    from cdml_edge.window.items import FileIdentity

    return FileIdentity.of(st)


def test_kept_files_are_all_remembered_beyond_the_old_bound_of_16384(tmp_path: Path) -> None:
    """No count bound: 16,400 kept files (the old bound forgot the oldest 16) are all known."""
    pf = PendingFiles(max_pending=64, stable_seconds=0.1, polling=False)
    paths = []
    for i in range(16_400):
        p = tmp_path / f"f{i}.jpg"
        p.write_bytes(b"x")
        paths.append(p)
        _kept(pf, p)
    assert pf.kept == 16_400
    for p in (paths[0], paths[15], paths[-1]):  # the oldest too: an event does not take it
        pf.notice(str(p), os.stat(p), closed=True, writing=False)
    assert len(pf) == 0
    paths[0].write_bytes(b"changed")
    pf.notice(str(paths[0]), os.stat(paths[0]), closed=True, writing=False)
    assert len(pf) == 1  # a new version is new


def test_files_in_flight_are_never_forgotten(tmp_path: Path) -> None:
    pf = PendingFiles(max_pending=64, stable_seconds=0.1, polling=False)
    flying = tmp_path / "flying.jpg"
    flying.write_bytes(b"in flight")
    st = os.stat(flying)
    pf.notice(str(flying), st, closed=True, writing=False)
    pf.taken(str(flying), _ident(st))
    for i in range(5):
        p = tmp_path / f"k{i}.jpg"
        p.write_bytes(b"k")
        _kept(pf, p)
    pf.notice(str(flying), st, closed=True, writing=False)
    assert len(pf) == 0 and pf.kept == 5 and pf.in_flight == 1
    pf.release(str(flying), keep=False)
    assert pf.in_flight == 0


def test_a_kept_file_is_never_in_neither_the_in_flight_set_nor_the_record(
    tmp_path: Path,
) -> None:
    """A scan noticing the file while it is being recorded as kept does not take it again.

    The soak caught it: the file left the in-flight set before it entered the record, and a
    notice in between made it pending (one result twice). The notice is made here from
    inside the record's write, the moment the race needs.
    """
    from cdml_edge.intake.kept import KeptFiles

    p = tmp_path / "a.jpg"
    p.write_bytes(b"x")
    st = os.stat(p)

    class NoticingRecord(KeptFiles):
        def put(self, path: str, ident) -> None:  # type: ignore[no-untyped-def]
            pf.notice(path, st, closed=True, writing=False)  # a scan, right now
            super().put(path, ident)

    pf = PendingFiles(max_pending=64, stable_seconds=0.1, polling=False, kept=NoticingRecord())
    _kept(pf, p)
    assert len(pf) == 0 and pf.kept == 1


def test_a_backlog_taken_in_parts_is_stat_ed_once_per_file_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget that takes 50 files per pass must not make each pass re-judge all 1,000."""
    from cdml_edge.intake import pending

    pf = PendingFiles(max_pending=2000, stable_seconds=0.0, polling=False)
    for i in range(1000):
        p = tmp_path / f"f{i:04d}.jpg"
        p.write_bytes(b"x")
        os.utime(p, ns=(0, i * 10**9))  # mtime order = name order
        pf.notice(str(p), os.stat(p), closed=False, writing=False)  # renamed in: not closed
    stats: list[str] = []
    real_stat = os.stat

    def counting_stat(path: str, **kw: bool) -> os.stat_result:
        stats.append(path)
        return real_stat(path, **kw)

    monkeypatch.setattr(pending.os, "stat", counting_stat)
    taken: list[str] = []
    while len(pf):
        for n, path in enumerate(pf.ready()):
            if n == 50:
                break  # the budget is full: the rest stays for the next pass
            taken.append(path)
            pf.taken(path, _ident(real_stat(path)))
            # (the source reads it here; its window finishes it later)
    assert taken == sorted(taken) and len(taken) == 1000  # oldest mtime first, each once
    assert len(stats) <= 1000 + 20 * 1, len(stats)  # at most one look past each pass's budget
