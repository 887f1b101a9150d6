"""Inference settings: what ``models.<modality>`` says reaches everything that uses it.

The onnxruntime session, the start-up log, ``doctor`` and replay.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnxruntime as ort
import pytest
from helpers.models import brightness_classifier

from cdml_edge.config import ModelConfig, parse_config
from cdml_edge.config.loading import ConfigError
from cdml_edge.model.runner import ModelOverrides, ModelRunner, load_runners
from cdml_edge.model.session import CPU, CUDA, InferenceSettings, resolve_providers

SPIN = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return brightness_classifier(tmp_path_factory.mktemp("m") / "b.onnx")


def _applied(runner: ModelRunner) -> tuple[int, int, str, str, object]:
    o = runner.session.get_session_options()
    return (
        o.intra_op_num_threads,
        o.inter_op_num_threads,
        *(o.get_session_config_entry(k) for k in SPIN),
        o.graph_optimization_level,
    )


def test_defaults_are_for_small_boards_and_match_the_config() -> None:
    assert InferenceSettings.from_config(ModelConfig(path=Path("m.onnx"))) == InferenceSettings()
    s = InferenceSettings()
    assert (s.intra_op_threads, s.inter_op_threads, s.spinning) == (1, 1, False)


def test_the_session_runs_with_the_defaults(model: Path) -> None:
    """Without a config the session does not spin and runs on the calling thread."""
    runner = ModelRunner.load(model)
    assert _applied(runner) == (1, 1, "0", "0", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)


def test_configured_settings_reach_the_session(model: Path) -> None:
    mc = ModelConfig(
        path=model,
        intra_op_threads=2,
        inter_op_threads=0,
        spinning=True,
        graph_optimization="basic",
    )
    runner = ModelRunner.load(model, ModelOverrides.from_config(mc))
    assert _applied(runner) == (2, 0, "1", "1", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    assert runner.describe() == (
        "CPUExecutionProvider; threads intra-op 2, inter-op auto; spinning on; "
        "graph optimization basic"
    )


def test_providers_default_to_cuda_only_where_onnxruntime_has_it() -> None:
    want = [CUDA, CPU] if CUDA in ort.get_available_providers() else [CPU]
    assert resolve_providers(None) == want
    assert resolve_providers(["CPUExecutionProvider"]) == [CPU]


def test_bad_settings_are_config_errors_naming_the_field() -> None:
    base = {"path": "m.onnx"}
    with pytest.raises(ConfigError) as info:
        parse_config({"models": {"image": {**base, "intra_op_threads": -1}}}, "f.yaml")
    assert "models.image.intra_op_threads" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_config({"models": {"image": {**base, "graph_optimization": "max"}}}, "f.yaml")
    assert "models.image.graph_optimization" in str(info.value)


def test_start_up_log_names_the_settings(model: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cdml_edge.model.runner")
    load_runners({"image": (model, ModelOverrides())}, warm_up=True, batch={"image": 4})
    line = next(r.getMessage() for r in caplog.records if "brightness" in r.getMessage())
    assert "CPUExecutionProvider; threads intra-op 1, inter-op 1; spinning off" in line
    assert "loaded in" in line and "warmed up in" in line


def test_doctor_and_replay_use_the_configured_settings(model: Path, tmp_path: Path) -> None:
    from cdml_edge.doctor.model_checks import check_model
    from cdml_edge.retrain.replay_job import load_replay_runners

    cfg = parse_config(
        {"models": {"image": {"path": str(model), "intra_op_threads": 2, "spinning": True}}},
        "f.yaml",
    )
    check = check_model("image", cfg)
    assert check.ok, check.detail
    assert "threads intra-op 2, inter-op 1; spinning on" in check.detail
    configured = load_replay_runners(cfg)["image"]
    assert _applied(configured)[:3] == (2, 1, "1")
    # a --model file replacing the configured one keeps its modality's settings
    other = brightness_classifier(tmp_path / "new.onnx")
    replaced = load_replay_runners(cfg, [other])["image"]
    assert replaced.path == other and _applied(replaced)[:3] == (2, 1, "1")
