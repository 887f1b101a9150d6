"""``LiveBatchLoader``: every member of one archive, decoded per modality (numpy, no torch).

The agent side hands it a freshly packed window (bytes) or a retained archive (path).
The archive is read exactly once, in one ``read_many`` call, when the loader is built;
the getters decode from those bytes and memoise their results.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import numpy as np

from cdml_edge.decode import DECODERS, CsvTable, DecodeError, TextData, modality_for
from cdml_edge.decode.image import TargetSize
from cdml_edge.modality import MODALITIES

OnError = Literal["raise", "skip"]


class LiveBatchLoader:
    """Decoded views of an archive's members, grouped by modality.

    Each getter returns ``{member name: value}`` in archive order. With
    ``on_error="skip"`` a member that fails to decode is left out and its
    :class:`DecodeError` kept in :attr:`errors`; with ``"raise"`` (default) it is raised.
    """

    def __init__(
        self,
        archive: str | os.PathLike[str] | bytes | bytearray | memoryview | Any,
        *,
        on_error: OnError = "raise",
        modalities: dict[str, str] | None = None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error = on_error
        self.errors: dict[str, DecodeError] = {}
        self._memo: dict[tuple[Any, ...], dict[str, Any]] = {}
        arc: Any
        if hasattr(archive, "read_many") and hasattr(archive, "names"):
            arc, owned = archive, False
        else:
            from cdml_edge.archive import open_archive

            src = bytes(archive) if isinstance(archive, (bytearray, memoryview)) else archive
            arc, owned = open_archive(src), True
        try:
            self.name: str = str(getattr(arc, "name", "<archive>"))
            names = [n for n in arc.names() if not n.endswith("/")]
            self._data: dict[str, bytes] = dict(zip(names, arc.read_many(names), strict=True))
        finally:
            if owned:
                arc.close()
        overrides = modalities or {}
        self.modality: dict[str, str] = {n: overrides.get(n, modality_for(n)) for n in names}

    # -- raw ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._data)

    def read(self, name: str) -> bytes:
        return self._data[name]

    def members(self, modality: str) -> list[str]:
        return [n for n, m in self.modality.items() if m == modality]

    def summary(self) -> dict[str, Any]:
        """Counts and bytes per modality, and the member total."""
        per: dict[str, dict[str, int]] = {}
        for n, m in self.modality.items():
            entry = per.setdefault(m, {"count": 0, "bytes": 0})
            entry["count"] += 1
            entry["bytes"] += len(self._data[n])
        return {
            "archive": self.name,
            "members": len(self._data),
            "bytes": sum(len(v) for v in self._data.values()),
            "modalities": per,
            "errors": sorted(self.errors),
        }

    # -- decoded --------------------------------------------------------------------------
    def _decoded(self, modality: str, **opts: Any) -> dict[str, Any]:
        """Every member of ``modality`` decoded by its decoder with ``opts`` (those that
        apply to it), in archive order; memoised per modality and options."""
        decoder = DECODERS[modality]
        kw = decoder.pick(opts)
        key = (modality, *((k, kw.get(k, v)) for k, v in decoder.options.items()))
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        out: dict[str, Any] = {}
        for n in self.members(modality):
            try:
                out[n] = decoder(self._data[n], n, **kw)
            except DecodeError as exc:
                if self.on_error == "raise":
                    raise
                self.errors[n] = exc
        self._memo[key] = out
        return out

    def get_images(self, target_size: TargetSize = None) -> dict[str, np.ndarray]:
        """uint8 ``H×W×3`` RGB per image member (resized when ``target_size`` is given)."""
        return self._decoded("image", target_size=target_size)

    def get_audio(
        self,
        n_mfcc: int = 20,
        *,
        sample_rate: int = 16000,
        mode: str = "mfcc",
        hop_length: int = 512,
        n_fft: int = 2048,
    ) -> dict[str, np.ndarray]:
        """float32 MFCCs ``(n_mfcc, frames)`` (or waveforms) per audio member."""
        return self._decoded(
            "audio",
            sample_rate=sample_rate,
            mode=mode,
            n_mfcc=n_mfcc,
            hop_length=hop_length,
            n_fft=n_fft,
        )

    def get_csv(self) -> dict[str, CsvTable]:
        """Parsed tables (numeric values, column names) per CSV member."""
        return self._decoded("csv")

    def get_tabular(self) -> dict[str, np.ndarray]:
        """float32 2-D arrays of every CSV and time-series member."""
        out = {n: t.values for n, t in self.get_csv().items()}
        out.update(self._decoded("timeseries"))
        return {n: out[n] for n in self._data if n in out}

    def get_json(self) -> dict[str, Any]:
        return self._decoded("json")

    def get_text(self) -> dict[str, TextData]:
        return self._decoded("text")

    def get_binary(self) -> dict[str, bytes]:
        return self._decoded("binary")

    def get_all(
        self, target_size: TargetSize = None, n_mfcc: int = 20
    ) -> dict[str, dict[str, Any]]:
        """Every modality present: ``{modality: {member: value}}``."""
        present = set(self.modality.values())
        return {
            m: self._decoded(m, target_size=target_size, n_mfcc=n_mfcc)
            for m in MODALITIES
            if m in present
        }

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"LiveBatchLoader({self.name!r}, members={len(self)})"
