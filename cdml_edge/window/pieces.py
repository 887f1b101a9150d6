"""Window members -> the pieces the models score: a whole item, or one row range of a series.

A member is decoded once per distinct decoding its models ask for (one full-size decode
serves every image model that letterboxes, crops or detects) and prepared once per model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cdml_edge.decode import DecodeError
from cdml_edge.model.inputs import ImageInput, ModelInput
from cdml_edge.model.prepare import Geometry, finish_images, image_geometry, stage_image
from cdml_edge.model.runner import ModelRunner
from cdml_edge.window.inputs import MODEL_INPUTS, ModalityInput
from cdml_edge.window.manifest import ManifestItem


@dataclass
class Piece:
    """One unit the models score: a whole item or one segment of a series."""

    item: ManifestItem
    modality: str
    suffix: str  # "" for a whole item, "#rows=0-255" for a segment
    inputs: dict[str, np.ndarray] = field(default_factory=dict)  # model name -> its input
    geometry: dict[str, Geometry] = field(default_factory=dict)  # image models: pixel mapping
    staged: set[str] = field(default_factory=set)  # inputs still to finish (model_batch)

    @property
    def array(self) -> np.ndarray | None:
        """The first model's input (``None`` when no model scores the modality).

        For an image staged for its batch (:attr:`staged`), its fitted 8-bit pixels:
        :func:`model_batch` makes the model input.
        """
        return next(iter(self.inputs.values()), None)


def model_batch(pieces: Sequence[Piece], name: str, runner: ModelRunner) -> np.ndarray:
    """The pieces' inputs for the model ``name`` as one batch.

    Images staged by :func:`~cdml_edge.model.prepare.stage_image` are finished together,
    once for the batch; the batch equals the one of inputs prepared one by one.
    """
    arrays = [p.inputs[name] for p in pieces]
    staged = [name in p.staged for p in pieces]
    if staged and all(staged):
        return finish_images(runner.spec, np.stack(arrays))
    if any(staged):
        arrays = [
            finish_images(runner.spec, a[None])[0] if s else a
            for a, s in zip(arrays, staged, strict=True)
        ]
    return np.stack(arrays)


def decode_input(runner: ModelRunner) -> ModelInput | None:
    """What the decoder is told of a model's input (``None``: decode at full size).

    Images the model letterboxes, crops or detects in are decoded at full size, others at the
    input size.
    """
    inp = runner.spec.input
    if isinstance(inp, ImageInput) and (inp.resize != "stretch" or runner.kind == "detector"):
        return None
    return inp


def item_pieces(
    item: ManifestItem,
    modality: str,
    data: bytes,
    runners: Mapping[str, ModelRunner] | ModelRunner | None,
    segment_rows: int | None,
) -> list[Piece]:
    """Decode one member for ``runners`` (by name; none: no model), prepare each model's input.

    A series longer than ``segment_rows`` rows becomes one piece per row range. Raises
    :class:`~cdml_edge.decode.DecodeError` (or ``ModelSpecError`` from preparing) on a bad
    member.
    """
    entry = MODEL_INPUTS.get(modality)
    if entry is None:
        raise DecodeError(item.name, f"no decoder for modality {modality!r}")
    models = as_runners(runners)
    decoded = _decode(entry, data, item.name, models)
    base = next(iter(decoded.values()))
    if base is None:  # checked only: no model takes this modality
        return [Piece(item, modality, "")]
    if not entry.segmented or segment_rows is None or base.shape[0] <= segment_rows:
        return [_piece(item, modality, "", models, decoded, None)]
    return [
        _piece(item, modality, suffix, models, decoded, rows)
        for suffix, rows in _segments(base.shape[0], segment_rows)
    ]


def as_runners(
    runners: Mapping[str, ModelRunner] | ModelRunner | None,
) -> Mapping[str, ModelRunner]:
    """Runners by name, from a mapping, one runner or none."""
    if runners is None:
        return {}
    if isinstance(runners, ModelRunner):
        return {runners.name: runners}
    return runners


def _decode(
    entry: ModalityInput, data: bytes, name: str, models: Mapping[str, ModelRunner]
) -> dict[str, np.ndarray | None]:
    """Each model's decoded array (``""``: the one decode when no model takes the member)."""
    if not models:
        return {"": entry.decode(data, name, None)}
    wants = {k: decode_input(r) for k, r in models.items()}
    images = [w for w in wants.values() if isinstance(w, ImageInput) or w is None]
    if images and len({_key(w) for w in wants.values()}) > 1:  # one full-size image decode
        wants = dict.fromkeys(wants)
    cache: dict[str, np.ndarray | None] = {}
    out: dict[str, np.ndarray | None] = {}
    for k, want in wants.items():
        key = _key(want)
        if key not in cache:
            cache[key] = entry.decode(data, name, want)
        out[k] = cache[key]
    return out


def _key(inp: ModelInput | None) -> str:
    return "" if inp is None else inp.model_dump_json()


def _piece(
    item: ManifestItem,
    modality: str,
    suffix: str,
    models: Mapping[str, ModelRunner],
    decoded: Mapping[str, np.ndarray | None],
    rows: tuple[int, int] | None,
) -> Piece:
    piece = Piece(item, modality, suffix)
    for k, runner in models.items():
        array = decoded[k]
        if array is None:
            continue
        part = array[rows[0] : rows[1]] if rows is not None else array
        staged = stage_image(runner.spec, part)
        if staged is None:
            piece.inputs[k] = runner.prepare(part)
        else:  # finished with the rest of the batch (model_batch)
            piece.inputs[k] = staged
            piece.staged.add(k)
        inp = runner.spec.input
        if isinstance(inp, ImageInput):
            piece.geometry[k] = image_geometry(inp, part.shape[0], part.shape[1])
    return piece


def _segments(n: int, rows: int) -> Iterator[tuple[str, tuple[int, int]]]:
    """``("#rows=a-b", (a, b + 1))`` for consecutive ranges of ``rows`` rows."""
    for start in range(0, n, rows):
        end = min(n, start + rows)
        yield f"#rows={start}-{end - 1}", (start, end)
