"""Home Assistant ids of names that differ only in '.' and '_' stay apart, and stay put.

Home Assistant reads node and object ids of ``[a-zA-Z0-9_-]`` only, so a '.' becomes '_'
in a discovery topic. Two devices ``line.1`` and ``line_1`` on one broker announced on the
same topics: each one's retained configs replaced the other's. And a source ``cam.1``
changed its topics when a source ``cam_1`` was added beside it (the clash made it give its
id up). A name whose '.' is lost gets 6 hex digits of the name after it, whatever else is
configured; a name without a '.' keeps its id as it was.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cdml_edge.config import AppConfig, parse_config
from cdml_edge.outputs.homeassistant import discovery_configs

HA_TOPIC = re.compile(r"[^/]+/(\w+)/([a-zA-Z0-9_-]+)/([a-zA-Z0-9_-]+)/config")


def _config(tmp_path: Path, device: str, sources: list[str]) -> AppConfig:
    return parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "device": {"id": device},
            "sources": [
                {"name": s, "path": str(tmp_path / s), "modality": "image"} for s in sources
            ],
            "mqtt": {"url": "mqtt://127.0.0.1:1883", "discovery": "homeassistant"},
        }
    )


def test_two_devices_that_differ_only_in_dot_and_underscore_announce_apart(
    tmp_path: Path,
) -> None:
    dotted = discovery_configs(_config(tmp_path, "line.1", ["cam"]))
    plain = discovery_configs(_config(tmp_path, "line_1", ["cam"]))
    assert not set(dotted) & set(plain), sorted(set(dotted) & set(plain))
    for topic in [*dotted, *plain]:
        assert HA_TOPIC.fullmatch(topic), topic
    assert {HA_TOPIC.fullmatch(t)[2] for t in plain} == {"line_1"}  # type: ignore[index]
    nodes = {HA_TOPIC.fullmatch(t)[2] for t in dotted}  # type: ignore[index]
    assert len(nodes) == 1 and next(iter(nodes)).startswith("line_1_"), nodes
    uids = [c["unique_id"] for c in [*dotted.values(), *plain.values()]]
    assert len(set(uids)) == len(uids)
    ids = {json.dumps(c["device"]["identifiers"]) for c in [*dotted.values(), *plain.values()]}
    assert len(ids) == 2


def test_a_dotted_source_keeps_its_ids_whatever_is_configured_beside_it(tmp_path: Path) -> None:
    alone = discovery_configs(_config(tmp_path, "edge-1", ["cam.1"]))
    beside = discovery_configs(_config(tmp_path, "edge-1", ["cam_1", "cam.1"]))
    assert set(alone) <= set(beside)  # cam.1's topics did not move
    assert {t: c["unique_id"] for t, c in alone.items()} == {
        t: beside[t]["unique_id"] for t in alone
    }
    plain = discovery_configs(_config(tmp_path, "edge-1", ["cam_1"]))
    assert set(plain) <= set(beside)  # nor cam_1's
    assert len(beside) == len(alone) + len(plain) - 1  # one device entity
    assert len({c["unique_id"] for c in beside.values()}) == len(beside)


def test_names_without_a_dot_keep_the_ids_they_had(tmp_path: Path) -> None:
    configs = discovery_configs(_config(tmp_path, "edge-1", ["cam"]))
    assert "homeassistant/sensor/edge-1/cam_label/config" in configs
    assert configs["homeassistant/sensor/edge-1/cam_label/config"]["unique_id"] == (
        "cdml_edge-1_cam_label"
    )
    assert "homeassistant/binary_sensor/edge-1/online/config" in configs
