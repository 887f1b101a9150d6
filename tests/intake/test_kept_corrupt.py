"""A kept-file record that goes bad under a running agent never costs the user a file.

A record whose pages are damaged (a worn SD card, a bad sector) opens (its rows count) but
its lookups fail: ``database disk image is malformed``. Each lookup of a new file in the
keep folder raised into the folder's reader, which took it for a fault of the file
(``IntakeFault``) and moved the user's file to the quarantine, whose bound then deletes
the oldest. The real agent, a real record damaged on disk, real files.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_config

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.intake.kept import KeptFiles, kept_path
from cdml_edge.window.items import FileIdentity

PAGE = 4096
INDEX_LEAF = 0x0A  # the b-tree page type of a WITHOUT ROWID table's leaves


def _damaged_record(path: Path, folder: Path) -> None:
    """A record of 300 files once kept in ``folder``, the cells of its leaf pages overwritten.

    Its page headers stay intact, so it opens and counts its rows; a lookup reads the cells.
    """
    record = KeptFiles(path)
    for i in range(300):
        record.put(str(folder / f"old-{i:05d}.jpg"), FileIdentity(1, i, 3, 4))
    record.close()
    data = bytearray(path.read_bytes())
    assert len(data) >= 3 * PAGE, len(data)
    for off in range(PAGE, len(data), PAGE):
        if data[off] == INDEX_LEAF:
            data[off + PAGE // 2 : off + PAGE] = b"\xff" * (PAGE // 2)
    path.write_bytes(bytes(data))
    assert len(KeptFiles(path)) == 300  # it opens, as a damaged record does


def test_a_damaged_record_moves_no_file_of_a_keep_folder(tmp_path: Path, models: Path) -> None:
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["state_dir"] = str(tmp_path / "state")
    doc["sources"][0].update(on_done="keep", stable_seconds=0.1)
    cfg_path.write_text(yaml.safe_dump(doc))
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    _damaged_record(kept_path(tmp_path / "state", "cam"), cam)
    names = [f"user-{i}.jpg" for i in range(3)]
    for i, name in enumerate(names):
        (cam / name).write_bytes(jpeg(50 + i))
    out = tmp_path / "out.jsonl"
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        wait_for(
            lambda: (
                len(of_kind(read_jsonl(out), "cam/result"))
                + len(of_kind(read_jsonl(out), "cam/error"))
                >= 3
            ),
            what="the three files handled",
        )
        (cam / "later.jpg").write_bytes(jpeg(9))
        wait_for(
            lambda: any(r["item"] == "later.jpg" for r in of_kind(read_jsonl(out), "cam/result")),
            what="a file after the start",
        )
    finally:
        agent.stop()
    lines = read_jsonl(out)
    assert not of_kind(lines, "cam/error"), of_kind(lines, "cam/error")
    assert sorted(r["item"] for r in of_kind(lines, "cam/result")) == sorted([*names, "later.jpg"])
    assert sorted(os.listdir(cam)) == sorted([*names, "later.jpg"])
    assert not list((tmp_path / "quarantine").rglob("*.jpg"))


def test_an_unexpected_fault_leaves_a_keep_folders_file_alone(tmp_path: Path) -> None:
    """Whatever fails while a keep folder's file is taken, the file stays (and it is said).

    Any exception while taking a file is an ``IntakeFault``, whose file the agent moves to
    the quarantine; a fault of the agent's own (as the damaged record above) then took the
    user's files away. A keep folder's file is reported and left where it is; in other
    folders the fault still sends it to the quarantine.
    """
    from helpers.source_sinks import Sink

    from cdml_edge.intake import FolderSource, FolderSpec, IntakeFault
    from cdml_edge.intake.budget import ByteBudget

    for keep in (True, False):
        folder = tmp_path / f"keep-{keep}"
        folder.mkdir()
        (folder / "user.jpg").write_bytes(jpeg(1))
        sink = Sink()
        spec = FolderSpec(name="cam", path=folder, modality="image", keep=keep)
        src = FolderSource(spec, ByteBudget(10**8), sink, sink.error)
        src._fault(str(folder / "user.jpg"), RuntimeError("a bug of the agent"))
        [(_, name, exc, path)] = sink.errors
        assert name == "user.jpg" and isinstance(exc, IntakeFault)
        if keep:
            assert path is None and not exc.quarantine
            assert str(exc).endswith("a bug of the agent; left in place (on_done: keep)")
        else:
            assert path == folder / "user.jpg" and exc.quarantine
        assert (folder / "user.jpg").exists()
