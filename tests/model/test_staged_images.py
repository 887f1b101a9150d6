"""Images prepared a batch at a time (stage, then finish) equal images prepared one by one."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cdml_edge.model.prepare import finish_images, stage_image
from cdml_edge.model.spec import ImageInput, ModelSpec, prepare_item
from cdml_edge.window.manifest import ManifestItem
from cdml_edge.window.pieces import Piece, model_batch


def _spec(**kw: object) -> ModelSpec:
    return ModelSpec(
        name="m",
        modality="image",
        task="classifier",
        input=ImageInput(**kw),  # type: ignore[arg-type]
        labels=["a", "b"],
    )


def _images(rng: np.random.Generator, h: int, w: int) -> list[np.ndarray]:
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(5)]


SPECS = [
    dict(zip(("resize", "dtype", "order", "layout"), combo, strict=True))
    for combo in itertools.product(
        ("stretch", "letterbox", "center_crop"),
        ("float32", "uint8"),
        ("RGB", "BGR"),
        ("NCHW", "NHWC"),
    )
]


@pytest.mark.parametrize("kw", SPECS, ids=lambda kw: "-".join(kw.values()))
@pytest.mark.parametrize("shape", [(32, 32), (48, 40), (20, 64)])
def test_a_finished_batch_equals_items_prepared_one_by_one(
    kw: dict[str, str], shape: tuple[int, int]
) -> None:
    spec = _spec(size=32, mean=[0.4, 0.5, 0.6], std=[0.2, 0.25, 0.3], **kw)
    images = _images(np.random.default_rng(sum(shape)), *shape)
    one_by_one = np.stack([prepare_item(spec, a) for a in images])
    staged = [stage_image(spec, a) for a in images]
    if any(s is None for s in staged):  # a stretched float input resizes after scaling
        assert kw["resize"] == "stretch" and kw["dtype"] == "float32" and shape != (32, 32)
        return
    batch = finish_images(spec, np.stack(staged))  # type: ignore[arg-type]
    assert batch.dtype == one_by_one.dtype and batch.shape == one_by_one.shape
    assert np.array_equal(batch, one_by_one)  # the same bits, not merely close


def test_a_scale_and_raw_uint8_inputs_stay_equal() -> None:
    images = _images(np.random.default_rng(1), 32, 32)
    for spec in (_spec(scale=1 / 128), _spec(dtype="uint8", mean=[0, 0, 0], std=[1, 1, 1])):
        staged = np.stack([stage_image(spec, a) for a in images])  # type: ignore[misc]
        assert np.array_equal(
            finish_images(spec, staged), np.stack([prepare_item(spec, a) for a in images])
        )


def test_images_not_staged_take_the_one_by_one_path() -> None:
    rgb = _spec(size=32)
    assert stage_image(rgb, np.zeros((32, 32), np.uint8)) is None  # grey
    assert stage_image(rgb, np.zeros((32, 32, 3), np.float32)) is None  # float pixels
    assert stage_image(rgb, np.zeros((40, 40, 3), np.uint8)) is None  # resized after scaling
    mono = _spec(channels=1, size=32, mean=[0.5], std=[0.5])
    assert stage_image(mono, np.zeros((32, 32, 3), np.uint8)) is None
    rgba = np.zeros((32, 32, 4), np.uint8)
    staged = stage_image(rgb, rgba)
    assert staged is not None and staged.shape == (32, 32, 3)


def _piece(k: int) -> Piece:
    item = ManifestItem(
        id=f"i{k}", member=f"{k}.jpg", name=f"{k}.jpg", size=1, mtime_ns=0, ts=0.0, sha256="0" * 64
    )
    return Piece(item, "image", "")


def test_a_batch_of_staged_and_prepared_pieces_equals_the_one_by_one_batch() -> None:
    spec = _spec(size=32)

    class _Runner:
        def __init__(self) -> None:
            self.spec = spec

    images = _images(np.random.default_rng(7), 32, 32)
    grey = np.random.default_rng(8).integers(0, 256, (32, 32), dtype=np.uint8)
    pieces = []
    for k, a in enumerate([*images, grey]):
        p = _piece(k)
        staged = stage_image(spec, a)
        if staged is None:
            p.inputs["m"] = prepare_item(spec, a)
        else:
            p.inputs["m"], p.staged = staged, {"m"}
        pieces.append(p)
    want = np.stack([prepare_item(spec, a) for a in [*images, grey]])
    assert np.array_equal(model_batch(pieces, "m", _Runner()), want)  # type: ignore[arg-type]
    assert np.array_equal(model_batch(pieces[:5], "m", _Runner()), want[:5])  # type: ignore[arg-type]
