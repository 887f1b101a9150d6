"""An agent run through an output on a full disk: ``out.jsonl`` a link to ``/dev/full``.

Every write to it fails with ENOSPC in the kernel; a regular file put at the path makes it
work again (the output follows it, as after logrotate).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.outputs.factory import leaves
from cdml_edge.outputs.jsonl import JsonlOutput
from helpers.agent_runs import jpeg, of_kind, read_jsonl, wait_for, write_atomic, write_config

FILES = ("a.jpg", "b.jpg", "c.jpg")


def full_disk(path: Path) -> None:
    """``path`` on a full disk: every write to it fails with ENOSPC."""
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/full")


def room_again(path: Path) -> None:
    """A regular file at ``path`` again (the output opens it at its next write)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(b"")
    os.replace(tmp, path)


def jsonl_failed(agent: Agent) -> int:
    return sum(o.stats()["failed"] for o in leaves(agent.output) if isinstance(o, JsonlOutput))


def config(tmp_path: Path, mqtt_prefix: str | None, **extra: Any) -> Path:
    """The test agent's configuration: one camera folder, MQTT under ``mqtt_prefix`` if any.

    ``extra``: more top-level settings (``retention={...}``).
    """
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc.update(extra)
    doc["sources"] = doc["sources"][:1]  # cam: windows of up to 8 images
    if mqtt_prefix is not None:
        doc["mqtt"] = {
            "url": "mqtt://127.0.0.1:1883",
            "topic_prefix": mqtt_prefix,
            "client_id": mqtt_prefix,
        }
        doc["spool"] = {"dir": "spool"}
    cfg_path.write_text(yaml.safe_dump(doc))
    return cfg_path


def run_through_a_full_disk(tmp_path: Path, cfg_path: Path, refusals: int) -> Agent:
    """Start the agent on a full disk, drop :data:`FILES`, free it after ``refusals``.

    Returns once every file is finished (deleted), with the agent stopped.
    """
    out, cam = tmp_path / "out.jsonl", tmp_path / "in/cam"
    full_disk(out)
    agent = Agent(load_config(cfg_path), cfg_path)
    agent.start()
    try:
        for i, name in enumerate(FILES):
            write_atomic(cam / name, jpeg(20 + 100 * i))
        wait_for(
            lambda: jsonl_failed(agent) >= refusals * len(FILES),
            timeout=30,
            what=f"{refusals} refused writes of the window",
        )
        room_again(out)
        wait_for(lambda: not any(cam.iterdir()), timeout=60, what="the files finished")
        wait_for(lambda: len(of_kind(read_jsonl(out), "/result")) >= len(FILES), what="the results")
    finally:
        agent.stop()
    return agent
