"""``reconnect_first`` from the configuration reaches the camera's backoff.

``CameraSpec.reconnect_first_s`` existed, but the factory never passed it: a configured camera
always retried first after 0.5 s. A real configuration file, a real capture process on an
empty video file (it fails at once), the delay its real backoff chose.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers.agent_runs import wait_for

from cdml_edge.config import ConfigError, load_config
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera.source import CameraSource
from cdml_edge.intake.factory import make_source


def _config(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "empty.mp4").write_bytes(b"")
    path = tmp_path / "agent.yaml"
    path.write_text(
        "sources:\n"
        "  - name: gate\n"
        "    kind: camera\n"
        "    modality: image\n"
        f"    url: {tmp_path / 'empty.mp4'}\n"
        f"{extra}"
    )
    return path


@pytest.mark.slow  # a capture process
def test_the_configured_first_reconnect_delay_is_used(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, "    reconnect_first: 4s\n    reconnect_max: 60s\n"))
    cam = make_source(cfg.sources[0], ByteBudget(10**9), lambda item: None, lambda *a: None)
    assert isinstance(cam, CameraSource)
    delays: list[float] = []
    chose = threading.Event()
    real_next = cam._backoff.next

    def recorded() -> float:  # the real backoff, its choice kept
        delays.append(real_next())
        chose.set()
        return delays[-1]

    cam._backoff.next = recorded  # type: ignore[method-assign]
    cam.start()
    try:
        wait_for(chose.is_set, 60, "the first failed attempt")
    finally:
        cam.stop()
    assert cam.spec.reconnect_first_s == 4.0
    assert 4.0 * 0.8 <= delays[0] <= 4.0 * 1.2, delays  # ±20 % jitter around 4 s


def test_the_default_first_delay_stays_half_a_second(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, ""))
    assert cfg.sources[0].reconnect_first == 0.5
    cam = make_source(cfg.sources[0], ByteBudget(10**9), lambda item: None, lambda *a: None)
    assert isinstance(cam, CameraSource) and cam.spec.reconnect_first_s == 0.5


def test_a_first_delay_over_the_longest_is_refused(tmp_path: Path) -> None:
    path = _config(tmp_path, "    reconnect_first: 60s\n    reconnect_max: 30s\n")
    with pytest.raises(ConfigError, match="reconnect_first.*longer than reconnect_max"):
        load_config(path)
