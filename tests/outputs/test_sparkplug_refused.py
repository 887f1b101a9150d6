"""Sparkplug B births after a batch the publisher refused (spool disk full, outbox full).

The births carry each metric's last value; a value of a refused batch was never published,
so the next NBIRTH / DBIRTH must not show it (the caller takes the batch again). Those of
its messages the publisher kept in its outbox show once they are sent (spooled or PUBACKed).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pysparkplug as spb
import pytest
from helpers.full_disk import FullDisk
from helpers.mqtt_brokers import broker_protocol, wait_until
from helpers.ports import free_port

import cdml_edge.outputs.mqtt.spool as spool_mod
from cdml_edge.config import parse_config
from cdml_edge.outputs.factory import make_output
from cdml_edge.outputs.mqtt.publisher import OutputUnavailable
from cdml_edge.outputs.sparkplug.output import SparkplugOutput
from cdml_edge.window.topics import OutMessage


def _output(tmp_path: Path, spool: Path) -> SparkplugOutput:
    cfg = parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": "edge-1"},
            "sources": [{"name": "cam1", "path": str(tmp_path / "cam1"), "modality": "image"}],
            "outbox": {"max_bytes": 8 * 1024},
            "spool": {"dir": str(spool)},
            "mqtt": {
                "url": f"mqtt://127.0.0.1:{free_port()}",  # no broker: all goes to the spool
                "format": "sparkplug_b",
                "sparkplug": {"group_id": f"g{uuid.uuid4().hex[:8]}"},
                "protocol": broker_protocol(),
            },
        }
    )
    out = make_output(cfg)
    assert isinstance(out, SparkplugOutput)
    return out


def _results(label: str, n: int) -> list[OutMessage]:
    return [
        OutMessage(
            "cam1/result",
            json.dumps({"id": f"{label}{i}", "label": label, "item": "x" * 300}).encode(),
        )
        for i in range(n)
    ]


def _dbirth(out: SparkplugOutput) -> dict[str, Any]:
    """The metrics of cam1's next DBIRTH, decoded by pysparkplug."""
    _, raw = next(b for b in out.node.births() if b[0].endswith("/DBIRTH/edge-1/cam1"))
    payload = spb.DBirth.decode(raw)
    return {str(m.name): None if m.is_null else m.value for m in payload.metrics}


def test_a_refused_batch_leaves_the_births_values_as_they_were(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    out = _output(tmp_path, full_disk.path / "spool")
    out.start()
    try:
        out.publish_batch(_results("a", 1))  # accepted: in the spool
        assert _dbirth(out)["result/id"] == "a0"
        full_disk.fill()
        with pytest.raises(OutputUnavailable):  # neither the spool nor the outbox takes all
            out.publish_batch(_results("b", 60))
        kept = out.publisher.stats()["outbox_depth"]  # these go out once the disk is free
        assert 0 < kept < 60 and out.publisher.stats()["refused"] == 60 - kept
        metrics = _dbirth(out)
        assert metrics["result/id"] == "a0", metrics  # those kept are not sent yet
        full_disk.free()  # the I/O thread spools those kept: sent, their values show
        assert wait_until(lambda: _dbirth(out)["result/id"] == f"b{kept - 1}", 10), _dbirth(out)
    finally:
        full_disk.free()
        out.stop(timeout=0.5)


def test_a_batch_refused_as_a_whole_shows_none_of_its_values(
    full_disk: FullDisk, tmp_path: Path
) -> None:
    full_disk.inject_open(spool_mod)
    full_disk.inject_call(spool_mod, "atomic_write")
    out = _output(tmp_path, full_disk.path / "spool")
    out.start()
    try:
        out.publish_batch(_results("a", 1))
        full_disk.fill()
        with pytest.raises(OutputUnavailable):
            out.publish_batch(_results("b", 60))  # fills the outbox
        with pytest.raises(OutputUnavailable):
            out.publish_batch(_results("c", 3))  # nothing of it taken
        assert _dbirth(out)["result/id"] == "a0"  # b's kept ones are not sent yet
        full_disk.free()  # b's kept ones go to the spool: theirs show, none of c's
        assert wait_until(lambda: _dbirth(out)["result/id"].startswith("b"), 10), _dbirth(out)
    finally:
        full_disk.free()
        out.stop(timeout=0.5)
