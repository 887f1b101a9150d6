"""The input a model takes, per kind (image, audio, series): shape, normalisation, element type.

These records are part of the ``cdml.spec`` metadata of our models and are built from the
configuration for any other model (:mod:`cdml_edge.model.describe`). Every field added for
foreign models defaults to what our own models always did, so their metadata reads the same.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cdml_edge.errors import CdmlError
from cdml_edge.modality import ModelModality

DType = Literal["float32", "uint8", "float16"]


class ModelSpecError(CdmlError, ValueError):
    """A model file or spec is unusable; the message names the file or field."""


def one_line(exc: ValueError) -> str:
    """A validation error as one line: each problem as ``field: message``.

    Not pydantic's own report (its error count, ``[type=...]`` and web address, over
    several lines); any other error as it is.
    """
    if not isinstance(exc, ValidationError):
        return str(exc)
    parts = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageInput(_Strict):
    """Images: resized, scaled, then normalised per channel.

    Resized to ``size`` × ``height`` (``resize``), multiplied by ``scale`` (unset: divided by
    255), then ``(x - mean) / std`` per channel; ``uint8`` inputs get raw pixels.
    """

    kind: Literal["image"] = "image"
    channels: Literal[1, 3] = 3
    size: int = Field(default=32, ge=8, le=4096, description="Width (and height, when unset)")
    height: int | None = Field(default=None, ge=8, le=4096)
    mean: list[float] = Field(default_factory=lambda: [0.5, 0.5, 0.5])
    std: list[float] = Field(default_factory=lambda: [0.5, 0.5, 0.5])
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    order: Literal["RGB", "BGR"] = "RGB"
    dtype: DType = "float32"
    scale: float | None = None
    resize: Literal["stretch", "letterbox", "center_crop"] = "stretch"

    @model_validator(mode="after")
    def _check(self) -> ImageInput:
        _check_stats(self.mean, self.std, self.channels, "image")
        return self

    @property
    def width(self) -> int:
        """Width of the input in pixels (``size``)."""
        return self.size

    @property
    def rows(self) -> int:
        """Height of the input in pixels."""
        return self.height if self.height is not None else self.size

    def shape(self) -> list[int]:
        """Input shape without the batch dimension."""
        if self.layout == "NHWC":
            return [self.rows, self.size, self.channels]
        return [self.channels, self.rows, self.size]


class AudioInput(_Strict):
    """MFCC frames (n_mfcc × frames), per-coefficient ``(x - mean) / std``."""

    kind: Literal["audio"] = "audio"
    sample_rate: int = Field(default=16000, gt=0)
    n_mfcc: int = Field(default=20, gt=0)
    hop_length: int = Field(default=512, gt=0)
    n_fft: int = Field(default=2048, gt=0)
    frames: int = Field(default=32, gt=0)
    mean: list[float] | None = None
    std: list[float] | None = None
    dtype: DType = "float32"

    @model_validator(mode="after")
    def _check(self) -> AudioInput:
        _check_stats(self.mean, self.std, self.n_mfcc, "audio")
        return self

    def shape(self) -> list[int]:
        """Input shape without the batch dimension: ``[n_mfcc, frames]``."""
        return [self.n_mfcc, self.frames]

    def decode_kwargs(self) -> dict[str, int]:
        """MFCC parameters to pass to the audio decoder."""
        return {
            "sample_rate": self.sample_rate,
            "n_mfcc": self.n_mfcc,
            "hop_length": self.hop_length,
            "n_fft": self.n_fft,
        }


class SeriesInput(_Strict):
    """Time series / CSV rows: ``window`` rows × ``channels`` columns, per-column normalised.

    The model sees ``(channels, window)``, or with ``flat`` one vector of
    ``channels × window`` values (scikit-learn models take ``(N, features)``); CSV tables
    with one row of features use ``window=1``.
    """

    kind: Literal["series"] = "series"
    channels: int = Field(gt=0)
    window: int = Field(gt=0)
    columns: list[str] | None = None
    mean: list[float] | None = None
    std: list[float] | None = None
    dtype: DType = "float32"
    flat: bool = False

    @model_validator(mode="after")
    def _check(self) -> SeriesInput:
        _check_stats(self.mean, self.std, self.channels, "series")
        if self.columns is not None and len(self.columns) != self.channels:
            raise ValueError(f"columns: {len(self.columns)} names for {self.channels} channels")
        return self

    def shape(self) -> list[int]:
        """Input shape without the batch dimension (one vector with ``flat``)."""
        return [self.channels * self.window] if self.flat else [self.channels, self.window]


ModelInput = ImageInput | AudioInput | SeriesInput
InputSpec = Annotated[ModelInput, Field(discriminator="kind")]

# the input kind a model of each modality takes
INPUT_KIND: dict[ModelModality, str] = {
    "image": "image",
    "audio": "audio",
    "csv": "series",
    "timeseries": "series",
}


def _check_stats(mean: list[float] | None, std: list[float] | None, n: int, what: str) -> None:
    if (mean is None) != (std is None):
        raise ValueError(f"{what}: give both mean and std, or neither")
    if mean is None or std is None:
        return
    if len(mean) != n or len(std) != n:
        raise ValueError(f"{what}: mean/std need {n} values, got {len(mean)}/{len(std)}")
    if any(s <= 0 for s in std):
        raise ValueError(f"{what}: std values must be > 0")


__all__ = [
    "INPUT_KIND",
    "AudioInput",
    "DType",
    "ImageInput",
    "InputSpec",
    "ModelInput",
    "ModelSpecError",
    "SeriesInput",
    "one_line",
]
