"""Training as a new user meets it.

Validation uses the training classes, checkpoint names say what they hold, and a dataset with
nothing of the asked modality says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from cdml_edge import synth
from cdml_edge.archive import write_archive
from cdml_edge.cli import app
from cdml_edge.data.labels import LabelError

COLOURS = {"blue": (0, 0, 255), "green": (0, 255, 0), "red": (255, 0, 0)}


def _frames(classes: list[str], n: int, seed: int) -> list[tuple[str, bytes]]:
    """Flat frames of one colour per class, a little noise: trivially separable."""
    rng = np.random.default_rng(seed)
    items = []
    for cls in classes:
        for i in range(n):
            img = np.clip(np.array(COLOURS[cls]) + rng.normal(0, 8, (16, 16, 3)), 0, 255)
            items.append((f"{cls}/{i:03d}.png", synth.encode_png(img.astype(np.uint8))))
    return items


@pytest.fixture(scope="module")
def colour_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("colours")
    write_archive(d / "train.zip", _frames(["blue", "green", "red"], 16, 0))
    write_archive(d / "val.zip", _frames(["green", "red"], 8, 1))  # no blue
    write_archive(
        d / "odd.zip",
        _frames(["blue", "green"], 2, 2) + [("purple/000.png", _frames(["red"], 1, 3)[0][1])],
    )
    return {"train": d / "train.zip", "val": d / "val.zip", "odd": d / "odd.zip"}


def test_a_validation_set_takes_the_training_classes(colour_data: dict[str, Path]) -> None:
    from cdml_edge import CDMLStreamDataset

    train = CDMLStreamDataset(colour_data["train"], modality="image", labels="folder")
    val = CDMLStreamDataset(
        colour_data["val"], modality="image", labels="folder", classes=train.classes
    )
    assert val.classes == ["blue", "green", "red"]
    assert val.targets == [1] * 8 + [2] * 8  # green and red keep the training ids
    with pytest.raises(LabelError, match=r"odd\.zip.*'purple/000\.png' has class 'purple'"):
        CDMLStreamDataset(
            colour_data["odd"], modality="image", labels="folder", classes=train.classes
        )


def test_string_labels_of_a_mapping_index_into_classes(colour_data: dict[str, Path]) -> None:
    from cdml_edge import CDMLStreamDataset

    labels = {"green/000.png": "go", "red/000.png": "stop"}
    ds = CDMLStreamDataset(colour_data["val"], labels=labels, classes=["stop", "wait", "go"])
    assert ds.classes == ["stop", "wait", "go"] and ds.targets == [2, 0]
    with pytest.raises(LabelError, match="'maybe'"):
        CDMLStreamDataset(colour_data["val"], labels={"red/001.png": "maybe"}, classes=["go"])


def test_train_reports_val_acc_against_the_training_classes(
    colour_data: dict[str, Path], tmp_path: Path
) -> None:
    """val.zip lacks 'blue': val_acc must be what the model really gets right.

    Numbered on its own, val.zip made green/red 0/1 and a right answer (1/2) scored as wrong.
    """
    import torch

    from cdml_edge.nn.data import spec_dataset
    from cdml_edge.nn.recipes import train_from_archive

    res = train_from_archive(
        colour_data["train"],
        "image",
        4,
        tmp_path,
        image_size=16,
        val_data=colour_data["val"],
        batch_size=8,
        lr=5e-3,
    )
    model = res.trainer.model.eval()
    val = spec_dataset(colour_data["val"], res.spec, labels=None)  # truth from the names
    with torch.no_grad():
        x = torch.stack([val[i] for i in range(len(val))])
        predicted = model(x, return_dict=True)["logits"].argmax(1).tolist()
    truth = [res.classes.index(n.split("/")[0]) for n in val.names]
    really = sum(p == t for p, t in zip(predicted, truth, strict=True)) / len(truth)
    assert res.history[-1]["val_acc"] == pytest.approx(really)
    assert really > 0.9  # the colours are learnt; the check above is not vacuous


def test_train_cli_refuses_a_validation_class_unknown_to_training(
    colour_data: dict[str, Path], tmp_path: Path
) -> None:
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--data",
            str(colour_data["train"]),
            "--val-data",
            str(colour_data["odd"]),
            "--epochs",
            "1",
            "--image-size",
            "16",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cdml-edge train: ")
    assert "purple" in lines[0] and "training classes" in lines[0]


def test_anomaly_checkpoint_says_what_it_holds(tmp_path: Path) -> None:
    items = [(f"normal/{i}.csv", b) for i, b in enumerate(synth.vibration_csv(24, seed=3))]
    items += [(f"fault/{i}.csv", b) for i, b in enumerate(synth.vibration_csv(12, 3, True))]
    write_archive(tmp_path / "vib.zip", items)
    run = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--data",
            str(tmp_path / "vib.zip"),
            "--modality",
            "csv",
            "--epochs",
            "2",
            "--out",
            str(run),
            "--anomaly-normal",
            "normal",
            "--batch-size",
            "16",
        ],
    )
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in (run / "checkpoints").glob("*.pt"))
    assert "epoch-0002-anomaly.pt" in names and len(names) <= 2  # the last and the best
    out = res.stdout.strip().splitlines()
    final = json.loads(out[-1])
    assert Path(final["checkpoint"]).name == "epoch-0002-anomaly.pt"
    printed = f"cdml-edge export-onnx {final['checkpoint']} "
    assert any(printed in line for line in out[:-1]), res.stdout
    onnx_path = tmp_path / "vib.onnx"
    res = CliRunner().invoke(app, ["export-onnx", final["checkpoint"], str(onnx_path)])
    assert res.exit_code == 0, res.output
    from cdml_edge.model.spec import load_onnx_model

    assert load_onnx_model(onnx_path)[1].task == "anomaly"


def test_nothing_of_the_modality_names_what_the_archive_holds(
    colour_data: dict[str, Path],
) -> None:
    from cdml_edge import CDMLStreamDataset
    from cdml_edge.data import DatasetError

    with pytest.raises(
        DatasetError,
        match=r"train\.zip: no audio members to load "
        r"\(the archive holds 48 image members\)",
    ):
        CDMLStreamDataset(colour_data["train"], modality="audio", labels="folder")


def _split_export(path: Path, train: list[str], val: list[str]) -> Path:
    items = [(f"train/{n}", b) for n, b in _frames(train, 12, 4)]
    items += [(f"val/{n}", b) for n, b in _frames(val, 4, 5)]
    write_archive(path, items, manifest={"note": "an export made with --split"})
    return path


def _train_cli(data: Path, out: Path, *extra: str) -> Any:
    argv = ["train", "--data", str(data), "--epochs", "2", "--image-size", "16", "--out", str(out)]
    return CliRunner().invoke(app, [*argv, "--batch-size", "8", *extra])


def test_train_on_a_split_export_learns_from_train_and_measures_on_val(tmp_path: Path) -> None:
    """It learnt the split names as classes ("train", "val"); val/ lacking a class is said."""
    data = _split_export(tmp_path / "export.zip", ["blue", "green", "red"], ["green", "red"])
    res = _train_cli(data, tmp_path / "run")
    assert res.exit_code == 0, res.output
    final = json.loads(res.stdout.strip().splitlines()[-1])
    assert final["val_items"] == 8 and final["train_items"] == 36  # val/ and train/, as split
    warnings = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert warnings == [
        "cdml-edge train: warning: class 'blue' is in train/ but not in val/: its accuracy on "
        "val/ is not measured; export more of its windows (an earlier --since) or another --split"
    ]
    epochs = [ln for ln in res.stderr.splitlines() if ln.startswith("epoch ")]
    assert [ln.split(":")[0] for ln in epochs] == ["epoch 1/2", "epoch 2/2"]  # one line each
    assert "train_loss" in epochs[0] and "val_acc" in epochs[0] and "━" not in res.stderr


def test_a_class_missing_from_train_is_one_line_naming_it_and_the_fix(tmp_path: Path) -> None:
    """It stopped with a LabelError traceback."""
    data = _split_export(tmp_path / "export.zip", ["green", "red"], ["blue", "green"])
    res = _train_cli(data, tmp_path / "run")
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [
        f"cdml-edge train: {data}: class 'blue' is in val/ but not in train/: a model trained "
        "on train/ cannot learn it; export more of its windows (an earlier --since) or another "
        "--split"
    ]
    assert "Traceback" not in res.output


def test_keep_all_keeps_every_epoch(tmp_path: Path) -> None:
    data = _split_export(tmp_path / "export.zip", ["green", "red"], ["green", "red"])
    res = _train_cli(data, tmp_path / "run", "--keep-all")
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.pt"))
    assert names == ["epoch-0001.pt", "epoch-0002.pt"]


def test_a_classifier_of_one_class_is_refused_with_the_way_out(tmp_path: Path) -> None:
    """One class folder trained a classifier that always says it, at accuracy 1, in silence."""
    data = tmp_path / "normal-only.zip"
    write_archive(data, _frames(["green"], 8, 0))
    res = _train_cli(data, tmp_path / "run")
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [
        f"cdml-edge train: {data}: one class folder, 'green': a classifier needs two or more; "
        "for an anomaly model of normal data alone: --anomaly-normal green"
    ]
    assert not (tmp_path / "run" / "checkpoints").exists()
    res = _train_cli(data, tmp_path / "anomaly", "--anomaly-normal", "green")
    assert res.exit_code == 0, res.output
    assert "anomaly_threshold" in json.loads(res.stdout.strip().splitlines()[-1])
