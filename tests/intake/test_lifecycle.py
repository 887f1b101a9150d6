"""on_done acts only on the file that was scored; move_to and quarantine names never stick."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cdml_edge.fsio import NAME_MAX
from cdml_edge.intake import finishing
from cdml_edge.intake.finishing import FileLifecycle
from cdml_edge.window.items import CTIME_SETTLE_NS, FileIdentity


def _scored(p: Path) -> tuple[FileIdentity, str]:
    """What an item remembers of the file it read: identity and content hash."""
    return FileIdentity.of(os.stat(p)), hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def lc(tmp_path: Path) -> FileLifecycle:
    return FileLifecycle(tmp_path / "quarantine", 10**6)


@pytest.mark.parametrize("on_done", ["delete", "move"])
def test_an_unchanged_file_is_finished(tmp_path: Path, lc: FileLifecycle, on_done: str) -> None:
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _scored(p)
    lc.finish(p, on_done, tmp_path / "done", identity=ident, sha256=sha)  # type: ignore[arg-type]
    assert not p.exists() and lc.changed == 0
    assert (tmp_path / "done/a.jpg").exists() == (on_done == "move")


@pytest.mark.parametrize("on_done", ["delete", "move"])
def test_a_replaced_file_is_left_and_counted(
    tmp_path: Path, lc: FileLifecycle, on_done: str
) -> None:
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _scored(p)
    tmp = tmp_path / "a.jpg.tmp"
    tmp.write_bytes(b"newer!")  # same size
    os.replace(tmp, p)  # an atomic replace: a new inode under the same name
    assert (
        lc.finish(
            p,
            on_done,
            tmp_path / "done",
            identity=ident,  # type: ignore[arg-type]
            sha256=sha,
        )
        is None
    )
    assert p.read_bytes() == b"newer!" and lc.changed == 1
    assert not (tmp_path / "done").exists()


def test_a_file_rewritten_in_place_with_its_old_mtime_is_left(
    tmp_path: Path, lc: FileLifecycle
) -> None:
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _scored(p)
    st = p.stat()
    with open(p, "r+b") as fh:
        fh.write(b"SCORED")  # same inode, same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime: only content tells
    assert FileIdentity.of(os.stat(p)) == ident
    lc.finish(p, "delete", identity=ident, sha256=sha)
    assert p.read_bytes() == b"SCORED" and lc.changed == 1


def test_a_link_put_in_place_of_the_file_is_left(tmp_path: Path, lc: FileLifecycle) -> None:
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _scored(p)
    keep = tmp_path / "elsewhere"
    os.replace(p, keep)
    os.symlink(keep, p)  # the same inode, now behind a link
    lc.finish(p, "delete", identity=ident, sha256=sha)
    assert p.is_symlink() and keep.exists() and lc.changed == 1


def test_a_file_gone_already_counts_as_done(tmp_path: Path, lc: FileLifecycle) -> None:
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _scored(p)
    p.unlink()
    assert lc.finish(p, "move", tmp_path / "done", identity=ident, sha256=sha) is None
    assert lc.changed == 0 and lc.gone == 1


def test_a_255_byte_name_colliding_in_move_to_gets_a_unique_name(
    tmp_path: Path, lc: FileLifecycle
) -> None:
    src, done = tmp_path / "in", tmp_path / "done"
    src.mkdir()
    done.mkdir()
    for raw in (b"a" * 251 + b".csv", b"\xff" * 250 + b".csv", "é".encode() * 125 + b".csv"):
        assert len(raw) <= NAME_MAX
        name = os.fsdecode(raw)
        (done / name).write_bytes(b"earlier")
        (src / name).write_bytes(b"new")
        ident, sha = _scored(src / name)
        dest = lc.finish(src / name, "move", done, identity=ident, sha256=sha)
        assert dest is not None and dest.read_bytes() == b"new" and not (src / name).exists()
        assert len(os.fsencode(dest.name)) <= NAME_MAX
        assert not dest.name.startswith("."), dest.name  # never a hidden name
        assert dest.name.endswith(".1.csv")
        assert (done / name).read_bytes() == b"earlier"


def test_quarantine_names_the_file_as_the_event_does_and_is_owner_only(
    tmp_path: Path, lc: FileLifecycle
) -> None:
    p = tmp_path / os.fsdecode(b"bad\xff.jpg")
    p.write_bytes(b"x")
    os.chmod(p, 0o644)
    dest = lc.quarantine("cam", "bad%FF.jpg", p)
    assert dest == tmp_path / "quarantine/cam/bad%FF.jpg" and dest.read_bytes() == b"x"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    frame = lc.quarantine("cam", "frame-1.jpg", None, b"frame bytes")
    assert frame is not None and stat.S_IMODE(frame.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "quarantine/cam").stat().st_mode) == 0o700


@pytest.mark.parametrize("on_done", ["delete", "move"])
def test_a_file_replaced_right_after_the_check_is_not_the_one_deleted(
    tmp_path: Path, lc: FileLifecycle, on_done: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new version lands between the check and the unlink.

    Found by the soak test: the check reads and hashes the file, a wide window under load. The
    scored file is claimed by a rename first and checked again; a newer one is put back, never
    deleted or moved.
    """
    from cdml_edge.intake import finishing as lifecycle

    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _scored(p)
    real = lifecycle.still_scored

    def check_then_replace(*args: object, **kw: object) -> bool | None:
        same = real(*args, **kw)  # type: ignore[arg-type]
        newer = tmp_path / "a.jpg.tmp"
        newer.write_bytes(b"newer version")
        os.replace(newer, p)
        return same

    monkeypatch.setattr(lifecycle, "still_scored", check_then_replace)
    assert (
        lc.finish(
            p,
            on_done,
            tmp_path / "done",
            identity=ident,  # type: ignore[arg-type]
            sha256=sha,
        )
        is None
    )
    assert p.read_bytes() == b"newer version" and lc.changed == 1
    assert not (tmp_path / "done").exists() or not any((tmp_path / "done").iterdir())
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(".")) == []


# -- the content check skipped where the file's change time vouches for it -------------------


def _read_settled(p: Path) -> tuple[FileIdentity, str]:
    """What an item remembers of a file read ``CTIME_SETTLE_NS`` after its last change."""
    st = os.stat(p)
    return (
        FileIdentity.read_at(st, st.st_ctime_ns + CTIME_SETTLE_NS),
        hashlib.sha256(p.read_bytes()).hexdigest(),
    )


@pytest.fixture
def content_checks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files whose content ``on_done`` re-read and hashed."""
    seen: list[Path] = []
    real = finishing._content_matches

    def spy(path: Path, identity: FileIdentity, sha256: str) -> bool | None:
        seen.append(path)
        return real(path, identity, sha256)

    monkeypatch.setattr(finishing, "_content_matches", spy)
    return seen


@pytest.mark.parametrize("on_done", ["delete", "move"])
def test_a_file_read_well_after_its_last_change_is_finished_without_a_reread(
    tmp_path: Path, lc: FileLifecycle, content_checks: list[Path], on_done: str
) -> None:
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored" * 1000)
    ident, sha = _read_settled(p)
    lc.finish(p, on_done, tmp_path / "done", identity=ident, sha256=sha)  # type: ignore[arg-type]
    assert not p.exists() and lc.changed == 0 and content_checks == []
    assert (tmp_path / "done/a.jpg").exists() == (on_done == "move")


def test_a_file_read_right_after_its_last_change_is_reread(
    tmp_path: Path, lc: FileLifecycle, content_checks: list[Path]
) -> None:
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    st = os.stat(p)
    ident = FileIdentity.read_at(st, st.st_ctime_ns + CTIME_SETTLE_NS - 1)
    lc.finish(p, "delete", identity=ident, sha256=hashlib.sha256(b"scored").hexdigest())
    assert not p.exists() and content_checks == [p]


def test_a_settled_file_rewritten_in_place_with_its_old_mtime_is_left(
    tmp_path: Path, lc: FileLifecycle, content_checks: list[Path]
) -> None:
    """Size and mtime put back: the change time moved on, so the content is checked."""
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    time.sleep(2 * CTIME_SETTLE_NS / 1e9)  # the rewrite lands well after the first write
    ident, sha = _read_settled(p)
    st = p.stat()
    with open(p, "r+b") as fh:
        fh.write(b"SCORED")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert FileIdentity.of(os.stat(p)) == ident
    lc.finish(p, "delete", identity=ident, sha256=sha)
    assert p.read_bytes() == b"SCORED" and lc.changed == 1 and content_checks == [p]


def test_an_identity_from_a_kept_record_is_checked_by_content(
    tmp_path: Path, lc: FileLifecycle, content_checks: list[Path]
) -> None:
    """An identity without a read time (a record, a plain ``of``) never vouches."""
    p = tmp_path / "a.jpg"
    p.write_bytes(b"scored")
    ident, sha = _scored(p)
    assert not ident.settled
    lc.finish(p, "delete", identity=ident, sha256=sha)
    assert not p.exists() and content_checks == [p]


def test_read_at_judges_the_change_time_against_the_read() -> None:
    st = os.stat(__file__)
    assert FileIdentity.read_at(st, st.st_ctime_ns + CTIME_SETTLE_NS).settled
    assert not FileIdentity.read_at(st, st.st_ctime_ns + CTIME_SETTLE_NS - 1).settled
    assert not FileIdentity.read_at(st, st.st_ctime_ns - 10**9).settled  # a change "later"
    a, b = FileIdentity.read_at(st, st.st_ctime_ns + 10**12), FileIdentity.of(st)
    assert a == b and hash(a) == hash(b)  # the read time is no part of the identity


@pytest.mark.parametrize(
    "ctime_ns",
    [
        1_733_000_000 * 10**9,  # whole seconds: ext4 of 128-byte inodes, HFS+, some NFS servers
        1_733_000_002 * 10**9,  # FAT's two seconds
        1_733_000_000 * 10**9 + 230_000_000,  # exFAT's 10 ms
    ],
)
def test_a_change_time_as_coarse_as_the_margin_never_vouches(ctime_ns: int) -> None:
    """Timestamps that tick in 10 ms or more: such an identity is checked by content.

    A rewrite soon after the read could keep the change time there.
    """
    st = SimpleNamespace(st_dev=1, st_ino=2, st_size=3, st_mtime_ns=ctime_ns, st_ctime_ns=ctime_ns)
    assert not FileIdentity.read_at(st, ctime_ns + 10**9).settled  # type: ignore[arg-type]
    fine = SimpleNamespace(**{**vars(st), "st_ctime_ns": ctime_ns + 123_457})
    assert FileIdentity.read_at(fine, ctime_ns + 10**9).settled  # type: ignore[arg-type]
