"""The whole agent on hostile input.

Odd names end to end, special files and links reported, on_done acting only on what was
scored, quarantine owner-only. Real folders, real watchdog, real ONNX models, the real
JSON-lines output.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_atomic, write_config

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.outputs.factory import make_output
from cdml_edge.window.payloads import item_id
from cdml_edge.window.topics import OutMessage


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    """The test configuration and its camera folder, made."""
    cfg_path = write_config(tmp_path)
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    return cfg_path, cam


def _started(cfg_path: Path) -> Agent:
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    return agent


def test_a_non_utf8_name_survives_end_to_end(tmp_path: Path, models: Path) -> None:
    cfg_path = write_config(tmp_path, retention=True)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["sources"][0].update(on_done="move", move_to="done/cam")
    cfg_path.write_text(yaml.safe_dump(doc))
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    raw_good = b"ok-\xff\xfe.jpg"
    raw_bad = b"cut-\xe9\n.jpg"  # latin-1 e-acute and a newline: not UTF-8, not printable
    agent = _started(cfg_path)
    out = tmp_path / "out.jsonl"
    try:
        with open(os.fsencode(cam) + b"/" + raw_good, "wb") as fh:
            fh.write(jpeg(230))
        good_st = os.stat(os.fsencode(cam) + b"/" + raw_good)
        with open(os.fsencode(cam) + b"/" + raw_bad, "wb") as fh:
            fh.write(jpeg(200)[:300])  # a truncated JPEG: quarantined
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="the result")
        wait_for(lambda: len(of_kind(read_jsonl(out), "/error")) == 1, what="the error event")
        (cam / "after.jpg").write_bytes(jpeg(10))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 2, what="a later result")
        wait_for(lambda: not (cam / "after.jpg").exists(), what="after.jpg moved")
    finally:
        agent.stop()
    lines = read_jsonl(out)
    results = {r["item"]: r for r in of_kind(lines, "/result")}
    assert set(results) == {"ok-%FF%FE.jpg", "after.jpg"}
    assert results["ok-%FF%FE.jpg"]["id"] == item_id(
        "cam", os.fsdecode(raw_good), good_st.st_size, good_st.st_mtime_ns, content=jpeg(230)
    )
    (err,) = of_kind(lines, "/error")
    assert err["item"] == "cut-%E9\n.jpg" and err["error_type"] == "DecodeError"
    quarantined = Path(err["quarantined_path"])
    assert quarantined.parent == tmp_path / "quarantine/cam" and quarantined.is_file()
    assert quarantined.name == "cut-%E9\n.jpg"  # the name the event gives, valid UTF-8
    # the moved file keeps its bytes; the retained archive and manifest hold the shown name
    assert sorted(os.listdir(os.fsencode(tmp_path / "done/cam"))) == [b"after.jpg", raw_good]
    members = set()
    for arc in (tmp_path / "ret").glob("*.zip"):
        with zipfile.ZipFile(arc) as zf:
            members |= set(zf.namelist())
    assert {"ok-%FF%FE.jpg", "after.jpg"} <= members
    assert os.listdir(os.fsencode(cam)) == []


def test_special_files_and_links_become_events_and_counters(tmp_path: Path, models: Path) -> None:
    cfg_path, cam = _setup(tmp_path)
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(jpeg(240))
    os.symlink(secret, cam / "link.jpg")
    os.mkfifo(cam / "fifo.jpg")
    agent = _started(cfg_path)
    out = tmp_path / "out.jsonl"
    try:
        (cam / "real.jpg").write_bytes(jpeg(10))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="the real file")
        wait_for(lambda: len(of_kind(read_jsonl(out), "/error")) == 2, what="two events")
        wait_for(
            lambda: any(h["errors"] >= 2 for h in of_kind(read_jsonl(out), "/health")),
            what="counted in health",
        )
    finally:
        agent.stop()
    lines = read_jsonl(out)
    assert [r["item"] for r in of_kind(lines, "/result")] == ["real.jpg"]
    errors = {e["item"]: e for e in of_kind(lines, "/error")}
    assert set(errors) == {"link.jpg", "fifo.jpg"}
    assert errors["fifo.jpg"]["error_type"] == "NotRegularFile"
    assert errors["link.jpg"]["error_type"] == "LinkRefused"
    assert all(e["quarantined_path"] is None for e in errors.values())
    exposition = agent.metrics.exposition().decode()
    assert 'cdml_edge_errors_total{stage="not_regular"} 1.0' in exposition
    assert 'cdml_edge_errors_total{stage="symlink"} 1.0' in exposition
    assert (cam / "link.jpg").is_symlink() and (cam / "fifo.jpg").exists()
    assert secret.read_bytes() == jpeg(240)


class _GatedOutput:
    """The real JSON-lines output, with ``on_durable`` calls held until :meth:`release`.

    Then they are made in order: the windows stay in flight for as long as the test wants.
    """

    def __init__(self, real: Any) -> None:
        self.real = real
        self.opened = False
        self.held: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def publish_batch(
        self,
        msgs: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
    ) -> None:
        def hold() -> None:
            with self._lock:
                if not self.opened:
                    self.held.append(on_durable)  # type: ignore[arg-type]
                    return
            on_durable()  # type: ignore[misc]

        self.real.publish_batch(msgs, hold if on_durable is not None else None, on_given_up)

    def release(self) -> None:
        with self._lock:
            self.opened = True
            held, self.held = self.held, []
        for cb in held:
            cb()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_on_done_leaves_a_file_replaced_while_its_window_was_in_flight(
    tmp_path: Path, models: Path
) -> None:
    cfg_path = write_config(tmp_path)
    cfg = load_config(cfg_path)
    output = _GatedOutput(make_output(cfg))
    agent = Agent(cfg, cfg_path, output=output)  # type: ignore[arg-type]
    cam = tmp_path / "in/cam"
    out = tmp_path / "out.jsonl"
    p = cam / "a.jpg"
    agent.start()
    try:
        write_atomic(p, jpeg(240))  # scored as "bright"
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="first result")
        wait_for(lambda: len(output.held) == 1, what="its window in flight")
        p.unlink()  # a new file under the same name (a new inode), still being written
        with open(p, "wb") as fh:
            new = jpeg(10)
            fh.write(new[:200])
            fh.flush()
            output.release()  # the first window becomes durable now
            wait_for(lambda: agent.lifecycle.changed == 1, what="the change noticed")
            fh.write(new[200:])
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 2, what="new result")
        wait_for(lambda: not p.exists(), what="the scored new version deleted")
    finally:
        agent.stop()
    results = of_kind(read_jsonl(out), "/result")
    assert [r["label"] for r in results] == ["bright", "dark"]
    assert results[0]["id"] != results[1]["id"]
    assert 'cdml_edge_on_done_skipped_total{reason="changed"} 1.0' in (
        agent.metrics.exposition().decode()
    )


def test_quarantine_is_owner_only_by_default_and_takes_a_configured_mode(
    tmp_path: Path, models: Path
) -> None:
    cfg_path, cam = _setup(tmp_path)
    bad = cam / "cut.jpg"
    bad.write_bytes(jpeg(200)[:300])
    os.chmod(bad, 0o644)
    agent = _started(cfg_path)
    q = tmp_path / "quarantine"
    try:
        wait_for(lambda: (q / "cam/cut.jpg").exists(), what="quarantined")
    finally:
        agent.stop()
    assert _mode(q / "cam/cut.jpg") == 0o600
    assert _mode(q / "cam") == 0o700 and _mode(q) == 0o700

    doc = yaml.safe_load(cfg_path.read_text())
    doc["quarantine"] = {"dir": "quarantine2", "mode": "0640"}
    cfg_path.write_text(yaml.safe_dump(doc))
    (cam / "cut2.jpg").write_bytes(jpeg(200)[:300])
    agent = _started(cfg_path)
    q2 = tmp_path / "quarantine2"
    try:
        wait_for(lambda: (q2 / "cam/cut2.jpg").exists(), what="quarantined with a mode")
    finally:
        agent.stop()
    assert _mode(q2 / "cam/cut2.jpg") == 0o640 and _mode(q2 / "cam") == 0o750


def test_logged_names_have_their_control_characters_escaped(
    tmp_path: Path, models: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg_path, cam = _setup(tmp_path)
    (cam / "x\x1b[2J\rforged.jpg").write_bytes(jpeg(200)[:300])
    caplog.set_level(logging.INFO)
    agent = _started(cfg_path)
    try:
        wait_for(
            lambda: any("quarantined" in r.getMessage() for r in caplog.records),
            what="the quarantine logged",
        )
    finally:
        agent.stop()
    logged = [r.getMessage() for r in caplog.records if "forged" in r.getMessage()]
    assert logged and all("\x1b" not in m and "\r" not in m for m in logged)
    assert any("x\\x1b[2J\\rforged.jpg" in m for m in logged), logged


def test_keep_means_keep_a_file_too_large_to_quarantine_is_left_and_said_so(
    tmp_path: Path, models: Path
) -> None:
    """Larger than a window and than quarantine.max_bytes: left in place, nothing evicted."""
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["sources"][0].update(on_done="keep")
    doc["sources"][0]["window"]["max_bytes"] = "8KiB"
    doc["quarantine"]["max_bytes"] = "16KiB"
    cfg_path.write_text(yaml.safe_dump(doc))
    cam = tmp_path / "in/cam"
    cam.mkdir(parents=True)
    earlier = tmp_path / "quarantine/cam"
    earlier.mkdir(parents=True)
    for i in range(3):
        (earlier / f"earlier{i}.jpg").write_bytes(b"q" * 4000)
    agent = _started(cfg_path)
    out = tmp_path / "out.jsonl"
    try:
        big = cam / "big.jpg"
        write_atomic(big, os.urandom(40_000))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/error")) == 1, what="the error event")
        write_atomic(cam / "small.jpg", jpeg(100))
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) == 1, what="a result")
    finally:
        agent.stop()
    [err] = of_kind(read_jsonl(out), "/error")
    assert err["error_type"] == "FileTooLarge" and err["quarantined_path"] is None
    assert err["message"].endswith("; left in place (on_done: keep)"), err
    assert big.exists() and big.stat().st_size == 40_000
    assert sorted(p.name for p in earlier.iterdir()) == [f"earlier{i}.jpg" for i in range(3)]
