"""Replay: retained windows re-scored through the live pipeline, deterministically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.models import brightness_classifier
from helpers.retention_data import scored_ring

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.retrain.replay import iter_replay, replay_to_jsonl
from cdml_edge.store.sidecar import list_retained

T0 = 1_790_000_000.0
VALUES = [[10, 200, 30], [250, 5], [128, 140, 90, 220], [60]]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return brightness_classifier(tmp_path_factory.mktemp("m") / "brightness.onnx")


def _runners(model: Path, labels: list[str] | None = None):  # type: ignore[no-untyped-def]
    return load_runners({"image": (model, ModelOverrides(labels=labels))}, warm_up=False)


def test_replay_matches_live_and_is_byte_identical(tmp_path: Path, model: Path) -> None:
    live = scored_ring(tmp_path / "ring", model, VALUES)
    out1, out2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    st = replay_to_jsonl(tmp_path / "ring", _runners(model), out1)
    replay_to_jsonl(tmp_path / "ring", _runners(model), out2)
    assert out1.read_bytes() == out2.read_bytes()
    recs = [json.loads(line) for line in out1.read_text().splitlines()]
    live_results = [r for o in live for r in o.results]  # type: ignore[attr-defined]
    assert [r["id"] for r in recs] == [r.id for r in live_results]
    assert [r["label"] for r in recs] == [r.label for r in live_results]
    assert [r["score"] for r in recs] == [r.score for r in live_results]
    assert all(r["was"]["label"] == r["label"] for r in recs)
    assert all("latency_ms" not in r and "seq" not in r for r in recs)
    labels = [r["label"] for r in recs]
    assert labels[:3] == ["dark", "bright", "dark"]
    assert st.windows == 4 and st.items == 10 and st.changed_labels == 0 and st.missing == 0
    assert st.models == {"image": "brightness@1.0.0"}


def test_same_windows_in_tar_zst_give_the_same_results(tmp_path: Path, model: Path) -> None:
    scored_ring(tmp_path / "zip", model, VALUES)
    scored_ring(tmp_path / "tzst", model, VALUES, archive_format="tar.zst")
    assert list_retained(tmp_path / "tzst")[0].file.endswith(".tar.zst")
    replay_to_jsonl(tmp_path / "zip", _runners(model), tmp_path / "z.jsonl")
    replay_to_jsonl(tmp_path / "tzst", _runners(model), tmp_path / "t.jsonl")
    assert (tmp_path / "z.jsonl").read_bytes() == (tmp_path / "t.jsonl").read_bytes()


def test_new_model_is_compared_with_the_retained_verdicts(tmp_path: Path, model: Path) -> None:
    scored_ring(tmp_path / "ring", model, VALUES)
    flipped = _runners(model, labels=["bright", "dark"])  # a "new model" that disagrees
    st = replay_to_jsonl(tmp_path / "ring", flipped, tmp_path / "new.jsonl")
    recs = [json.loads(line) for line in (tmp_path / "new.jsonl").read_text().splitlines()]
    assert st.changed_labels == st.items == 10
    assert all(r["label"] != r["was"]["label"] for r in recs)
    assert recs[0]["was"] == {
        "label": "dark",
        "score": recs[0]["was"]["score"],
        "anomaly": False,
        "anomaly_score": None,
        "error": None,
        "model": "brightness",
        "model_version": "1.0.0",
    }


def test_since_until_and_archive_order(tmp_path: Path, model: Path) -> None:
    scored_ring(tmp_path / "ring", model, VALUES, t0=T0)
    # windows close at T0+5, +15, +25, +35
    st = replay_to_jsonl(
        tmp_path / "ring", _runners(model), tmp_path / "o.jsonl", since=T0 + 10, until=T0 + 30
    )
    recs = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert st.windows == 2
    assert sorted({r["window_id"] for r in recs}) == ["cam1-w001", "cam1-w002"]
    assert [r["window_id"] for r in recs] == sorted(r["window_id"] for r in recs)


def test_window_evicted_during_replay_is_counted(tmp_path: Path, model: Path) -> None:
    scored_ring(tmp_path / "ring", model, VALUES)
    records = list_retained(tmp_path / "ring")
    (tmp_path / "ring" / records[1].file).unlink()
    st = replay_to_jsonl(tmp_path / "ring", _runners(model), tmp_path / "o.jsonl", records=records)
    assert st.missing == 1 and st.windows == 3


def _copy_of_first_window(ring: Path) -> Path:
    """The ring's first window again under another name: the same archive bytes."""
    from cdml_edge.store.sidecar import SIDECAR_SUFFIX, RetainedWindow

    sidecar = sorted(ring.glob(f"*{SIDECAR_SUFFIX}"))[0]
    rw = RetainedWindow.from_bytes(sidecar.read_bytes(), str(sidecar))
    stem = sidecar.name[: -len(SIDECAR_SUFFIX)] + ".copy"
    (ring / (stem + ".zip")).write_bytes((ring / rw.archive.file).read_bytes())
    ref = rw.archive.model_copy(update={"file": stem + ".zip"})
    (ring / (stem + SIDECAR_SUFFIX)).write_bytes(rw.model_copy(update={"archive": ref}).to_bytes())
    return ring / (stem + SIDECAR_SUFFIX)


def test_a_window_kept_twice_is_replayed_once_and_named(tmp_path: Path, model: Path) -> None:
    """Two sidecars recording the same archive SHA-256: one window, scored once."""
    ring = tmp_path / "ring"
    scored_ring(ring, model, VALUES)
    copy = _copy_of_first_window(ring)
    st = replay_to_jsonl(ring, _runners(model), tmp_path / "o.jsonl")
    assert st.windows == 4 and st.items == 10 and st.duplicates == 1 and st.missing == 0
    lines = (tmp_path / "o.jsonl").read_text().splitlines()
    assert len(lines) == 10 and len({json.loads(x)["id"] for x in lines}) == 10
    [note] = st.notes
    assert copy.name in note and "skipped as a duplicate window" in note
    assert st.errors == [] and st.as_dict()["duplicates"] == 1
    # a copy whose archive is gone is missing (nothing to be a copy of), named
    (ring / copy.name.replace(".window.json", ".zip")).unlink()
    st = replay_to_jsonl(ring, _runners(model), tmp_path / "o.jsonl")
    assert st.windows == 4 and st.duplicates == 0 and st.missing == 1
    [note] = st.notes
    assert note.endswith("; window missing") and ".copy.zip" in note


def test_replay_does_not_write_into_the_ring(tmp_path: Path, model: Path) -> None:
    scored_ring(tmp_path / "ring", model, VALUES)
    ring = tmp_path / "ring"
    (ring / ".tmp-being-written.zip").write_bytes(b"a live agent is writing this")
    before = {p.name: p.stat().st_mtime_ns for p in ring.iterdir()}
    wins = list(iter_replay(ring, _runners(model)))
    assert len(wins) == 4
    assert {p.name: p.stat().st_mtime_ns for p in ring.iterdir()} == before
    msgs = wins[0].messages()
    assert [m.topic for m in msgs] == ["replay/cam1/result"] * 3 + ["replay/cam1/window"]


def test_replay_without_catalog_reads_the_sidecars(tmp_path: Path, model: Path) -> None:
    scored_ring(tmp_path / "ring", model, VALUES)
    via_catalog = list_retained(tmp_path / "ring")
    (tmp_path / "ring" / "catalog.sqlite").unlink()
    assert list_retained(tmp_path / "ring") == via_catalog
    assert not (tmp_path / "ring" / "catalog.sqlite").exists()


def test_archive_whose_hash_changed_is_skipped_and_counted(tmp_path: Path, model: Path) -> None:
    scored_ring(tmp_path / "ring", model, VALUES)
    records = list_retained(tmp_path / "ring")
    bad = tmp_path / "ring" / records[2].file
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    bad.write_bytes(bytes(data))
    out = tmp_path / "o.jsonl"
    st = replay_to_jsonl(tmp_path / "ring", _runners(model), out)
    assert st.corrupt == 1 and st.windows == 3 and st.missing == 0
    assert len(st.errors) == 1 and records[2].file in st.errors[0]
    assert st.as_dict()["corrupt"] == 1
    ids = {json.loads(line)["window_id"] for line in out.read_text().splitlines()}
    assert records[2].window_id not in ids and len(ids) == 3


def test_run_replay_options_and_errors(tmp_path: Path, model: Path) -> None:
    import yaml

    from cdml_edge.retrain import OptionError, ReplayError
    from cdml_edge.retrain.replay_job import ReplayOptions, run_replay

    scored_ring(tmp_path / "ring", model, VALUES)
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "device": {"id": "edge-1"},
                "models": {"image": {"path": str(model)}},
                "retention": {"dir": "ring", "max_bytes": "64MiB"},
            }
        )
    )
    summary = run_replay(ReplayOptions(cfg, out=tmp_path / "r.jsonl", since="2026-01-01"))
    assert summary.stats.windows == 4 and summary.out == tmp_path / "r.jsonl"
    assert summary.line().startswith("replayed 4 windows, 10 results (")
    with pytest.raises(OptionError, match="--until: filter 'soon'"):
        run_replay(ReplayOptions(cfg, until="soon"))
    with pytest.raises(OptionError, match="no such retention folder"):  # a usage error
        run_replay(ReplayOptions(cfg, directory=tmp_path / "gone"))
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ReplayError, match="junk.onnx"):  # the run cannot start
        run_replay(ReplayOptions(cfg, models=[tmp_path / "junk.onnx"]))
