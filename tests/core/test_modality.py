"""The one modality list and the per-layer tables keyed by it."""

from __future__ import annotations

import pickle
from typing import get_args

import pytest

from cdml_edge.config import MODALITIES as CONFIG_MODALITIES
from cdml_edge.config import AppConfig
from cdml_edge.data.labels import LabelError
from cdml_edge.decode import DECODERS, DecodeError, decode
from cdml_edge.errors import CdmlError
from cdml_edge.modality import (
    EXTENSIONS,
    MODALITIES,
    MODEL_MODALITIES,
    SOURCE_MODALITIES,
    check_modality,
    default_patterns,
    modality_for,
)
from cdml_edge.model.runner import InferenceError
from cdml_edge.model.spec import INPUT_KIND, ModelSpec, ModelSpecError
from cdml_edge.window.inputs import MODEL_INPUTS
from cdml_edge.window.manifest import ManifestError, ManifestItem
from cdml_edge.window.pieces import item_pieces


def test_the_lists_nest() -> None:
    assert (*SOURCE_MODALITIES, "binary") == MODALITIES
    assert set(MODEL_MODALITIES) <= set(SOURCE_MODALITIES)
    assert set(EXTENSIONS) == set(SOURCE_MODALITIES)


def test_config_and_model_spec_take_the_modality_lists() -> None:
    assert CONFIG_MODALITIES == SOURCE_MODALITIES
    source = AppConfig.model_json_schema()["$defs"]["SourceConfig"]["properties"]["modality"]
    assert tuple(source["enum"]) == SOURCE_MODALITIES
    assert get_args(ModelSpec.model_fields["modality"].annotation) == MODEL_MODALITIES
    assert tuple(INPUT_KIND) == MODEL_MODALITIES


def test_one_decoder_per_modality_with_the_options_it_takes() -> None:
    assert tuple(DECODERS) == MODALITIES
    options = {m: set(d.options) for m, d in DECODERS.items()}
    assert options == {
        "image": {"target_size", "reduced", "max_pixels", "limits", "orientation"},
        "audio": {"sample_rate", "mode", "n_mfcc", "hop_length", "n_fft", "limits"},
        "csv": {"encoding", "limits"},
        "timeseries": {"key", "limits"},
        "json": {"encoding", "limits"},
        "text": {"encoding", "limits"},
        "binary": set(),
    }
    assert DECODERS["audio"].options["n_mfcc"] == 20


def test_decode_dispatches_through_the_table_and_ignores_foreign_options() -> None:
    table = decode(b"a;b\n1;2\n", "t.csv", target_size=8, n_mfcc=4)
    assert table.columns == ["a", "b"] and table.values.tolist() == [[1.0, 2.0]]
    assert decode(bytearray(b"\x00\x01"), "frame.raw") == b"\x00\x01"
    assert decode(b'{"a": 1}', "x.bin", "json") == {"a": 1}
    with pytest.raises(ValueError, match="unknown modality"):
        decode(b"", "x", "smell")


def test_one_sample_kind_per_modality() -> None:
    from cdml_edge.data.samples import SAMPLES  # torch: imported by the test, not at collection

    assert tuple(SAMPLES) == MODALITIES
    variable = {m: k.length_axis for m, k in SAMPLES.items() if k.length_axis is not None}
    assert variable == {"audio": -1, "csv": 0, "timeseries": 0}


def test_one_training_recipe_per_model_modality() -> None:
    from cdml_edge.nn.recipes import RECIPES, base_spec  # torch, as above

    assert tuple(RECIPES) == MODEL_MODALITIES
    with pytest.raises(ValueError, match="cannot train on modality 'json'"):
        base_spec("json", "m", None)


def test_window_inputs_cover_what_sources_produce() -> None:
    assert tuple(MODEL_INPUTS) == SOURCE_MODALITIES
    assert {m for m, e in MODEL_INPUTS.items() if e.segmented} == {"csv", "timeseries"}
    for modality in MODEL_MODALITIES:  # every modality a model scores can be warmed up
        sample = MODEL_INPUTS[modality].warm_up_sample
        assert sample is not None
        name, data = sample(None)
        decoded = MODEL_INPUTS[modality].decode(data, name, None)
        assert decoded is not None and decoded.size > 0
    assert MODEL_INPUTS["json"].decode(b"[1]", "a.json", None) is None  # checked only
    with pytest.raises(DecodeError):
        MODEL_INPUTS["text"].decode(b"\xff\xfe\xfa", "a.txt", None)


def test_a_window_member_of_no_window_input_fails_to_decode() -> None:
    item = ManifestItem(
        id="i", member="a.bin", name="a.bin", size=1, mtime_ns=0, ts=0.0, sha256="0" * 64
    )
    with pytest.raises(DecodeError, match="no decoder for modality 'binary'"):
        item_pieces(item, "binary", b"x", None, None)
    [piece] = item_pieces(item, "text", b"hi", None, None)
    assert piece.array is None and piece.suffix == ""


@pytest.mark.parametrize(
    ("name", "modality"),
    [
        ("cam/0001.JPG", "image"),
        ("a.flac", "audio"),
        ("t.tsv", "csv"),
        ("s.npz", "timeseries"),
        ("r.ndjson", "json"),
        ("notes.md", "text"),
        ("frame.raw", "binary"),
        ("noext", "binary"),
    ],
)
def test_modality_for(name: str, modality: str) -> None:
    assert modality_for(name) == modality


def test_check_modality() -> None:
    assert check_modality("binary") == "binary"
    with pytest.raises(ValueError, match="unknown modality 'smell'"):
        check_modality("smell")


def test_default_patterns() -> None:
    assert default_patterns("csv") == ("*.csv", "*.tsv", "*.CSV", "*.TSV")
    # a time series may come as a CSV file
    assert default_patterns("timeseries") == (
        "*.npy",
        "*.npz",
        "*.csv",
        "*.tsv",
        "*.NPY",
        "*.NPZ",
        "*.CSV",
        "*.TSV",
    )
    assert "*.JPEG" in default_patterns("image")
    assert default_patterns("binary") == ("*",)


@pytest.mark.parametrize(
    "error",
    [
        DecodeError("cam/1.jpg", "truncated"),
        DecodeError("cam/1.jpg: truncated"),  # the form a DataLoader re-raises
        DecodeError("", "empty"),
        ModelSpecError("m.onnx: no spec"),
        LabelError("labels.csv", "row 3 has no label"),
        ManifestError("w.zip", "no items"),
        InferenceError("model m (m.onnx): bad input"),
    ],
)
def test_typed_errors_derive_from_the_root_and_pickle(error: Exception) -> None:
    assert isinstance(error, CdmlError)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and vars(back) == vars(error)


def test_model_fits_is_the_one_rule_of_which_model_scores_which_items() -> None:
    from cdml_edge.modality import MODEL_MODALITIES, SOURCE_MODALITIES, items_for, model_fits

    table = {(m, s) for m in MODEL_MODALITIES for s in SOURCE_MODALITIES if model_fits(m, s)}
    assert table == {
        ("image", "image"),
        ("audio", "audio"),
        ("csv", "csv"),
        ("timeseries", "timeseries"),
        ("csv", "timeseries"),
        ("timeseries", "csv"),
    }
    assert items_for("timeseries") == {"csv", "timeseries"}
    assert items_for("image") == {"image"}


def test_validate_and_examples_apply_the_same_rule(tmp_path) -> None:
    """``config validate`` (the schema) and the calibration examples agree with model_fits."""
    import yaml

    from cdml_edge.config import ConfigError, load_config
    from cdml_edge.modality import model_fits
    from cdml_edge.window.examples import ExamplesError, example_files

    (tmp_path / "a.csv").write_text("1,2\n")
    (tmp_path / "b.wav").write_bytes(b"")
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    for model_mod, source_mod in [("timeseries", "csv"), ("image", "audio")]:
        cfg = tmp_path / f"{model_mod}-{source_mod}.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "sources": [
                        {
                            "name": "s",
                            "path": str(tmp_path),
                            "modality": source_mod,
                            "models": ["m"],
                        }
                    ],
                    "models": {"m": {"path": str(model), "modality": model_mod}},
                    "output": {"jsonl": "out.jsonl"},
                }
            )
        )
        try:
            load_config(cfg)
            validated = True
        except ConfigError:
            validated = False
        assert validated == model_fits(model_mod, source_mod)
    assert [p.name for p in example_files(tmp_path, "timeseries")] == ["a.csv"]
    with pytest.raises(ExamplesError, match="no image file"):
        example_files(tmp_path, "image")
