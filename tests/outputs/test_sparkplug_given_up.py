"""Sparkplug B births show only values that were published, not those the publisher gave up.

The births carry each metric's last value. A message the publisher takes and later gives
up on (larger than the spool, or than the broker's Maximum Packet Size) is never published:
its batch ends in ``on_given_up``. Its values were remembered when the publisher took it,
so the next DBIRTH showed a result no subscriber ever got.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pysparkplug as spb
from helpers.mqtt_brokers import broker_protocol, wait_until
from helpers.ports import free_port

from cdml_edge.config import parse_config
from cdml_edge.outputs.factory import make_output
from cdml_edge.outputs.sparkplug.output import SparkplugOutput
from cdml_edge.window.topics import OutMessage


def _output(tmp_path: Path) -> SparkplugOutput:
    cfg = parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": "edge-1"},
            "sources": [{"name": "cam1", "path": str(tmp_path / "cam1"), "modality": "image"}],
            "spool": {"dir": str(tmp_path / "spool"), "max_bytes": 64 * 1024},
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


def _result(rid: str, item: str = "x") -> OutMessage:
    return OutMessage("cam1/result", json.dumps({"id": rid, "label": "ok", "item": item}).encode())


def _dbirth(out: SparkplugOutput) -> dict[str, Any]:
    """The metrics of cam1's next DBIRTH, decoded by pysparkplug."""
    _, raw = next(b for b in out.node.births() if b[0].endswith("/DBIRTH/edge-1/cam1"))
    payload = spb.DBirth.decode(raw)
    return {str(m.name): None if m.is_null else m.value for m in payload.metrics}


def test_a_message_larger_than_the_spool_shapes_no_birth(tmp_path: Path) -> None:
    out = _output(tmp_path)
    out.start()
    said: list[str] = []
    try:
        out.publish_batch([_result("a0")], lambda: said.append("a durable"))
        assert wait_until(lambda: said == ["a durable"], 10)
        assert _dbirth(out)["result/id"] == "a0"
        big = _result("big0", item="y" * 100_000)  # larger than the spool: never published
        out.publish_batch(
            [big], lambda: said.append("big durable"), lambda: said.append("big given up")
        )
        assert wait_until(lambda: "big given up" in said, 10), said
        assert out.publisher.stats()["too_large"] == 1
        metrics = _dbirth(out)
        assert metrics["result/id"] == "a0", metrics  # the last value published
        assert metrics["result/item"] == "x"
    finally:
        out.stop(timeout=0.5)


def test_a_batch_with_one_message_given_up_keeps_the_values_of_the_others(
    tmp_path: Path,
) -> None:
    out = _output(tmp_path)
    out.start()
    said: list[str] = []
    try:
        batch = [_result("b0"), _result("big1", item="y" * 100_000)]
        out.publish_batch(batch, lambda: said.append("durable"), lambda: said.append("given up"))
        assert wait_until(lambda: said == ["given up"], 10), said
        assert _dbirth(out)["result/id"] == "b0"  # spooled: published once the broker is back
    finally:
        out.stop(timeout=0.5)
