"""The whole agent with an RTSP camera that goes away and comes back.

Results on a real Mosquitto, the camera's state on ``{source}/camera`` and in the health
payload, Prometheus ``cdml_edge_camera_*`` and ``/healthz`` (503 while the camera is down past
its grace).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import yaml
from helpers.agent_runs import wait_for
from helpers.camera_servers import RtspServer
from helpers.models import brightness_classifier
from helpers.ports import free_port
from paho.mqtt.enums import CallbackAPIVersion

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config


class Subscriber:
    def __init__(self, prefix: str) -> None:
        self.got: list[tuple[str, dict[str, Any], float]] = []
        self._lock = threading.Lock()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{prefix}")
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", 1883)
        self.client.subscribe(f"{prefix}/#", qos=1)
        self.client.loop_start()

    def _on_message(self, client: Any, userdata: Any, m: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.got.append((m.topic, json.loads(m.payload), time.time()))

    def of(self, suffix: str) -> list[tuple[dict[str, Any], float]]:
        with self._lock:
            return [(p, t) for topic, p, t in self.got if topic.endswith(suffix)]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.broker
def test_agent_rtsp_outage_shows_in_health_and_results_resume(tmp_path: Path) -> None:
    brightness_classifier(tmp_path / "brightness.onnx")
    prefix, port = f"t{uuid.uuid4().hex[:8]}", free_port()
    rtsp = RtspServer()
    cfg = {
        "device": {"id": "cam-dev"},
        "sources": [
            {
                "name": "gate",
                "kind": "camera",
                "url": rtsp.url,
                "modality": "image",
                "fps": 5,
                "window": {"seconds": "200ms", "max_items": 4},
                "read_timeout": "1500ms",
                "open_timeout": "3s",
                "reconnect_max": "500ms",
                "unhealthy_after": "4s",
            }
        ],
        "models": {"image": {"path": "brightness.onnx"}},
        "mqtt": {"url": "mqtt://127.0.0.1:1883", "topic_prefix": prefix},
        "spool": {"dir": "spool"},
        "quarantine": {"dir": "quarantine"},
        "health": {"interval": "300ms", "metrics_port": port},
    }
    path = tmp_path / "factory.yaml"
    path.write_text(yaml.safe_dump(cfg))
    sub = Subscriber(prefix)
    base = f"http://127.0.0.1:{port}"
    rtsp.start()
    agent = Agent(load_config(path), path)
    agent.start()
    try:
        wait_for(lambda: len(sub.of("/gate/result")) >= 3, timeout=40, what="first results")
        assert _get(base + "/healthz")[0] == 200

        rtsp.stop()
        wait_for(
            lambda: any(p["state"] == "failed" for p, _ in sub.of("/gate/camera")),
            timeout=30,
            what="the camera reported failed",
        )
        code, body = _get(base + "/healthz")
        assert code == 503, body
        health = json.loads(body)
        assert health["status"] == "camera_down" and health["cameras"]["gate"]["unhealthy"]
        wait_for(
            lambda: any(p["cameras"]["gate"]["state"] == "failed" for p, _ in sub.of("/health")),
            timeout=10,
            what="health payload",
        )
        down = [p for p, _ in sub.of("/health") if p["cameras"]["gate"]["state"] == "failed"][-1]
        cam = down["cameras"]["gate"]
        assert cam["down_for_s"] >= 4 and cam["last_frame_age_s"] >= 4
        assert cam["fps_captured"] == 0 and cam["url"] == rtsp.url
        metrics = _get(base + "/metrics")[1]
        assert 'cdml_edge_camera_state{source="gate",state="failed"} 1.0' in metrics
        assert 'cdml_edge_camera_unhealthy{source="gate"} 1.0' in metrics
        assert 'cdml_edge_errors_total{stage="camera"} 1.0' in metrics

        back = time.time()
        rtsp.start()
        wait_for(
            lambda: any(t > back for _, t in sub.of("/gate/result")),
            timeout=40,
            what="results after the camera came back",
        )
        wait_for(lambda: _get(base + "/healthz")[0] == 200, timeout=10, what="healthz ok again")
        wait_for(
            lambda: any(
                p["cameras"]["gate"]["fps_scored"] > 0 and p["cameras"]["gate"]["reconnects"] == 1
                for p, _ in sub.of("/health")
            ),
            timeout=20,
            what="health shows the camera scored again",
        )
        metrics = _get(base + "/metrics")[1]
        assert 'cdml_edge_camera_reconnects_total{source="gate"} 1.0' in metrics
    finally:
        agent.stop()
        rtsp.stop()
        sub.close()
    events = [p for p, _ in sub.of("/gate/camera")]
    states = [e["state"] for e in events]
    # one event on the way down, one past the grace, one on recovery: not one per retry
    assert states == ["streaming", "reconnecting", "failed", "streaming", "stopped"], states
    assert events[3]["reconnects"] == 1 and events[3]["failed_attempts"] >= 2
    assert events[3]["down_for_s"] >= 4 and events[3]["reason"] == events[1]["reason"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
