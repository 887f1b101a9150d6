"""``config validate`` checks what ``run`` needs, and ``run`` refuses the same problems.

``run`` exits with status 2 (systemd does not restart it in a loop) instead of crashing with 1.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.models import brightness_classifier, level_anomaly
from typer.testing import CliRunner

from cdml_edge.cli import app


def _write(tmp_path: Path, **extra: Any) -> Path:
    brightness_classifier(tmp_path / "brightness.onnx")
    (tmp_path / "in").mkdir(exist_ok=True)
    cfg: dict[str, Any] = {
        "sources": [{"name": "cam1", "path": "in", "modality": "image"}],
        "models": {"image": {"path": "brightness.onnx"}},
        "output": {"jsonl": "out.jsonl"},
    }
    cfg.update(extra)
    path = tmp_path / "factory.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _both(path: Path) -> tuple[Any, Any]:
    runner = CliRunner()
    validate = runner.invoke(app, ["config", "validate", str(path)])
    run = runner.invoke(app, ["run", "--config", str(path), "--duration", "0.5"])
    return validate, run


def test_a_runnable_config_is_valid_and_says_what_the_budget_admits(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["config", "validate", str(_write(tmp_path))])
    assert r.exit_code == 0, r.output
    assert (
        "valid (1 source, 1 model" in r.output
        and "largest file the budget admits: image" in r.output
        and str(tmp_path / "factory.state") in r.output
    )


@pytest.mark.parametrize(
    ("mqtt", "field", "fragment"),
    [
        ({"tls": {"ca": "no-such-ca.pem"}}, "mqtt.tls.ca", "no-such-ca.pem does not exist"),
        ({"tls": {"cert": "c.pem", "key": "k.pem"}}, "mqtt.tls.cert", "does not exist"),
        ({"username": "u", "password_file": "pw"}, "mqtt.password_file", "pw does not exist"),
        (
            {"username": "u", "password_env": "CDML_NO_SUCH_VAR"},
            "mqtt.password_env",
            "CDML_NO_SUCH_VAR is not set",
        ),
    ],
)
def test_files_the_broker_needs(tmp_path: Path, mqtt: dict, field: str, fragment: str) -> None:
    validate, run = _both(_write(tmp_path, mqtt={"url": "mqtts://127.0.0.1:1", **mqtt}))
    for r in (validate, run):
        assert r.exit_code == 2, r.output
        assert f"factory.yaml: {field}: " in r.output and fragment in r.output


def test_unreadable_or_special_files_are_named_not_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ca.pem")  # opening a FIFO would block the check for ever
    (tmp_path / "models").mkdir()
    path = _write(
        tmp_path,
        mqtt={"url": "mqtts://127.0.0.1:1", "tls": {"ca": "ca.pem"}},
        models={"image": {"path": "models"}},
    )
    done: list[Any] = []
    t = threading.Thread(
        target=lambda: done.append(CliRunner().invoke(app, ["config", "validate", str(path)])),
        daemon=True,
    )
    t.start()
    t.join(30)
    assert done, "validate hung on a FIFO"
    r = done[0]
    assert r.exit_code == 2
    assert "mqtt.tls.ca: " in r.output and "not a regular file" in r.output
    assert "models.image.path: " in r.output and "is a folder" in r.output


def test_a_model_of_another_modality_is_refused(tmp_path: Path) -> None:
    level_anomaly(tmp_path / "vib.onnx")  # a csv model
    path = _write(tmp_path, models={"image": {"path": "vib.onnx"}})
    validate, run = _both(path)
    for r in (validate, run):
        assert r.exit_code == 2, r.output
        assert "models.image.path: vib.onnx is a csv model" in r.output
        assert "sources cam1" in r.output


def test_a_budget_smaller_than_one_item_is_refused(tmp_path: Path) -> None:
    """It used to pass, then every file was quarantined as too large ("limit 0")."""
    path = _write(tmp_path, limits={"max_inflight_bytes": "8KiB"})
    validate, run = _both(path)
    for r in (validate, run):
        assert r.exit_code == 2, r.output
        assert "limits.max_inflight_bytes: 8.0 KiB holds no image item" in r.output
        assert "give at least" in r.output
    assert not (tmp_path / "factory.state" / "quarantine").exists()


def test_validate_takes_config_like_every_other_command(tmp_path: Path) -> None:
    path = str(_write(tmp_path))
    for argv in (["--config", path], ["-c", path], [path], [path, "--config", path]):
        r = CliRunner().invoke(app, ["config", "validate", *argv])
        assert r.exit_code == 0 and "valid (1 source, 1 model," in r.output, (argv, r.output)
    r = CliRunner().invoke(app, ["config", "validate", "--config", path, "other.yaml"])
    assert r.exit_code == 2 and "two files given" in r.output
    r = CliRunner().invoke(app, ["config", "validate"])
    assert r.exit_code == 2 and "validate --config FILE" in r.output


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_config_is_valid_for_its_board(config: Path) -> None:
    """Checked from any machine: nothing the configuration names is opened here."""
    r = CliRunner().invoke(app, ["config", "validate", "--config", str(config), "--for-board"])
    assert r.exit_code == 0, r.output
    assert f"{config}: valid for another machine (" in r.stdout
    from cdml_edge.config import load_config
    from cdml_edge.config.checks import named_files

    skipped = r.stdout.split("not checked here", 1)[1]
    for field, named in named_files(load_config(config)):
        assert f"  {field}: {named}: exists" in skipped  # each skipped check is named


def test_for_board_opens_no_file_it_names_but_checks_every_field(tmp_path: Path) -> None:
    board = {
        "sources": [{"name": "cam1", "path": "/srv/cam1", "modality": "image"}],
        "models": {"image": {"path": "/opt/models/digits.onnx"}},
        "mqtt": {
            "url": "mqtts://broker.plant:8883",
            "tls": {"ca": "/etc/ca.pem"},
            "username": "edge",
            "password_env": "CDML_NO_SUCH_VAR",
        },
    }
    path = tmp_path / "board.yaml"
    path.write_text(yaml.safe_dump(board))
    here = CliRunner().invoke(app, ["config", "validate", "--config", str(path)])
    assert here.exit_code == 2 and "/opt/models/digits.onnx does not exist" in here.output
    assert "--for-board checks it without the files it names" in here.output
    r = CliRunner().invoke(app, ["config", "validate", "--config", str(path), "--for-board"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1:] == [
        "not checked here (they need that machine's files and environment):",
        "  models.image.path: /opt/models/digits.onnx: exists, loads, fits image items, "
        "the budget holds one item",
        "  mqtt.tls.ca: /etc/ca.pem: exists, readable",
        "  mqtt.password_env: environment variable CDML_NO_SUCH_VAR is set",
    ]
    board["sources"][0]["window"] = {"seconds": 0}  # a field error is still an error
    path.write_text(yaml.safe_dump(board))
    r = CliRunner().invoke(app, ["config", "validate", "--config", str(path), "--for-board"])
    assert r.exit_code == 2 and "sources[0].window.seconds: " in r.output


@pytest.mark.parametrize(
    ("extra", "field", "name"),
    [
        (
            {"sources": [{"name": "cam1", "path": "afile", "modality": "image"}]},
            "sources[0].path",
            "afile",
        ),
        (
            {
                "sources": [
                    {
                        "name": "cam1",
                        "path": "in",
                        "modality": "image",
                        "on_done": "move",
                        "move_to": "afile",
                    }
                ]
            },
            "sources[0].move_to",
            "afile",
        ),
        ({"quarantine": {"dir": "afile"}}, "quarantine.dir", "afile"),
        ({"retention": {"dir": "afile"}}, "retention.dir", "afile"),
    ],
)
def test_a_folder_the_config_names_that_is_a_file_is_refused(
    tmp_path: Path, extra: dict, field: str, name: str
) -> None:
    """A source path that was a file passed, then the source thread died at every restart."""
    (tmp_path / name).write_bytes(b"not a folder")
    validate, run = _both(_write(tmp_path, **extra))
    for r in (validate, run):
        assert r.exit_code == 2, r.output
        assert f"factory.yaml: {field}: " in r.output and "is not a folder" in r.output


def test_a_model_file_that_is_not_a_model_is_exit_2_for_run_too(tmp_path: Path) -> None:
    """systemd restarts a unit that exits 3; a broken model is a configuration problem."""
    path = _write(tmp_path)
    (tmp_path / "brightness.onnx").write_bytes(b"\x08\x07 truncated protobuf")
    validate, run = _both(path)
    for r in (validate, run):
        assert r.exit_code == 2, r.output
        assert "models.image.path: " in r.output and "cannot be loaded" in r.output


def test_a_source_no_model_scores_is_valid_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Data collection without a model is allowed; every result then carries model "none"."""
    path = _write(tmp_path, models={})
    with caplog.at_level(logging.WARNING, logger="cdml_edge"):
        validate, run = _both(path)
    for r in (validate, run):
        assert r.exit_code == 0, r.output
    assert "no model scores source cam1 (image)" in validate.output
    assert "no model scores source cam1 (image)" in caplog.text  # the agent's log


def test_a_model_that_fails_to_load_for_want_of_memory_is_a_start_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 3 (systemd restarts it), not 2: the file is fine, the machine was short."""
    import cdml_edge.model.runner as runner_module
    from cdml_edge.model.runner import InferenceError, ModelRunner, ModelUnusable

    path = brightness_classifier(tmp_path / "b.onnx")

    def short_of_memory(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(runner_module, "open_session", short_of_memory)
    with pytest.raises(InferenceError) as info:
        ModelRunner.load(path)
    assert not isinstance(info.value, ModelUnusable)
