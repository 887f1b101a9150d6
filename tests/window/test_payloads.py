"""Payload models, topics, sequence numbers and the payload JSON Schemas."""

from __future__ import annotations

import json
import threading

import pytest
from pydantic import ValidationError

from cdml_edge.window.payloads import (
    ErrorEvent,
    HealthPayload,
    ItemResult,
    StatusPayload,
    WindowResult,
    item_id,
    payload_schemas,
)
from cdml_edge.window.topics import Sequencer, relative_topic, topic_for


def test_topics() -> None:
    assert topic_for("cdml", "edge-1", "status") == "cdml/edge-1/status"
    assert topic_for("cdml", "edge-1", "health") == "cdml/edge-1/health"
    assert topic_for("plant/a", "edge-1", "result", "cam1") == "plant/a/edge-1/cam1/result"
    assert topic_for("cdml", "edge-1", "window", "mic") == "cdml/edge-1/mic/window"
    assert relative_topic("result", "cam1") == "cam1/result"
    with pytest.raises(ValueError, match="needs a source"):
        topic_for("cdml", "edge-1", "result")
    with pytest.raises(ValueError, match="takes no source"):
        topic_for("cdml", "edge-1", "status", "cam1")
    with pytest.raises(ValueError, match="single MQTT topic level"):
        topic_for("cdml", "edge/1", "status")
    with pytest.raises(ValueError, match="single MQTT topic level"):
        relative_topic("result", "cam+")


def test_item_id_is_stable_and_distinguishes_files() -> None:
    a = item_id("cam1", "img_001.jpg", 1234, 1_700_000_000_000_000_000)
    assert a == item_id("cam1", "img_001.jpg", 1234, 1_700_000_000_000_000_000)
    assert a != item_id("cam1", "img_001.jpg", 1235, 1_700_000_000_000_000_000)
    assert a != item_id("cam2", "img_001.jpg", 1234, 1_700_000_000_000_000_000)
    assert a != item_id("cam1", "img_001.jpg", 1234, 1_700_000_000_000_000_001)


def test_sequencer_is_per_topic_and_thread_safe() -> None:
    seq = Sequencer()
    got: dict[str, list[int]] = {"a": [], "b": []}
    lock = threading.Lock()

    def work(topic: str) -> None:
        mine = [seq.next(topic) for _ in range(2000)]
        with lock:
            got[topic].extend(mine)

    threads = [threading.Thread(target=work, args=(t,)) for t in ("a", "b") * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got["a"]) == list(range(1, 8001))
    assert sorted(got["b"]) == list(range(1, 8001))
    assert seq.peek("a") == 8000 and seq.peek("zzz") == 0


def test_models_round_trip_and_forbid_unknown_fields() -> None:
    result = ItemResult(
        id=item_id("cam1", "a.jpg", 10, 5),
        window_id="w1",
        source="cam1",
        item="a.jpg",
        modality="image",
        ts=1.5,
        label="ok",
        score=0.9,
        anomaly=False,
        anomaly_score=0.1,
        latency_ms=3.2,
        model="tier2",
        model_version="1",
        seq=1,
        device="edge-1",
    )
    assert ItemResult.model_validate_json(result.model_dump_json()) == result
    with pytest.raises(ValidationError):
        ItemResult.model_validate({**result.model_dump(), "extra": 1})
    with pytest.raises(ValidationError):
        StatusPayload(state="sleeping", version="1", started_at=0, device="d")  # type: ignore[arg-type]
    window = WindowResult(
        window_id="w1",
        source="cam1",
        counts={"ok": 3},
        items=3,
        opened_ts=1,
        closed_ts=2,
        archive={"name": "w1.zip", "format": "zip", "bytes": 10, "sha256": "0" * 64},
        seq=1,
        device="edge-1",
    )
    assert window.archive is not None and window.archive.format == "zip"
    health = HealthPayload(dropped=2, spool_bytes=100, seq=1, device="edge-1")
    assert HealthPayload.model_validate_json(health.model_dump_json()).dropped == 2
    err = ErrorEvent(
        source="cam1",
        item="b.jpg",
        error_type="DecodeError",
        message="bad",
        ts=1.0,
        seq=1,
        device="edge-1",
    )
    assert err.quarantined_path is None


def test_payload_schemas_cover_every_topic_kind() -> None:
    schemas = payload_schemas()
    assert set(schemas) == {"status", "result", "window", "health", "error", "camera"}
    assert "id" in schemas["result"]["required"]
    assert schemas["status"]["properties"]["state"]["enum"] == ["online", "offline"]
    assert schemas["result"]["additionalProperties"] is False
    window = schemas["window"]
    assert "results" in window["properties"] and "results" not in window["required"]
    assert "mqtt.results: window" in window["properties"]["results"]["description"]


def test_payload_models_hold_no_private_attributes() -> None:
    """A pydantic private attribute is deep-copied into every instance: 14x the cost of a result.

    The optional extras' names are class variables, and an unset extra still stays out of
    the JSON.
    """
    from cdml_edge.window.payloads import PAYLOAD_MODELS, ModelVerdict

    for model in (*PAYLOAD_MODELS.values(), ModelVerdict):
        assert model.__private_attributes__ == {}, model.__name__
    r = ItemResult(
        id="a" * 32, window_id="w", source="s", item="x.jpg", modality="image", ts=1.0,
        latency_ms=2.0, model="m", seq=1, device="d",
    )  # fmt: skip
    assert '"top_k"' not in r.model_dump_json() and '"label":null' in r.model_dump_json()


def test_cli_payload_schema_shows_the_window_results() -> None:
    """``cdml-edge config schema --payloads``: a window's optional ``results``, item results."""
    from typer.testing import CliRunner

    from cdml_edge.cli import app

    r = CliRunner().invoke(app, ["config", "schema", "--payloads"])
    assert r.exit_code == 0, r.output
    window = json.loads(r.output)["window"]
    results = window["properties"]["results"]
    assert {"items": {"$ref": "#/$defs/ItemResult"}, "type": "array"} in results["anyOf"]
    assert "results" not in window["required"]
