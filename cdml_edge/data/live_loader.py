"""``LiveBatchLoader``: every member of one archive, decoded per modality (numpy, no torch).

The agent side hands it a freshly packed window (bytes, a :class:`~cdml_edge.live.PackedBatch`)
or a retained archive (path). The archive is read exactly once, in one ``read_many`` call,
when the loader is built; the getters decode from those bytes and memoise their results.

The getters cdmltrain 1.1.4 has return its shapes by default (lists in archive
order, see :mod:`~cdml_edge.data.cdmltrain_shapes`); ``by_member=True`` gives
``{member name: value}`` instead. A window's ``manifest.json`` is not a member: it is
:attr:`LiveBatchLoader.manifest`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import numpy as np

from cdml_edge.data import cdmltrain_shapes as views
from cdml_edge.decode import DECODERS, CsvTable, DecodeError, TextData, modality_for
from cdml_edge.decode.image import TargetSize
from cdml_edge.modality import MODALITIES

MANIFEST = "manifest.json"

OnError = Literal["raise", "skip"]


class LiveBatchLoader:
    """Decoded views of an archive's members, grouped by modality.

    Each getter returns cdmltrain 1.1.4's list form, or ``{member name: value}`` in archive order
    with ``by_member=True``. With ``on_error="skip"`` a member that fails to decode is left
    out and its :class:`DecodeError` kept in :attr:`errors`; with ``"raise"`` (default) it
    is raised.
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
        packed = getattr(archive, "archive", None)
        if isinstance(packed, bytes):  # a PackedBatch: its bytes, no disk read
            archive = packed
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
        self.manifest: dict[str, Any] | None = self._manifest(self._data.pop(MANIFEST, None))
        names = list(self._data)
        overrides = modalities or {}
        self.modality: dict[str, str] = {n: overrides.get(n, modality_for(n)) for n in names}

    def _manifest(self, raw: bytes | None) -> dict[str, Any] | None:
        """The window's ``manifest.json`` parsed; one that is not a JSON object stays a member."""
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value
        self._data[MANIFEST] = raw
        return None

    # -- raw ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """Member names in archive order (directories and the manifest left out)."""
        return list(self._data)

    def read(self, name: str) -> bytes:
        """A member's raw bytes (held in memory since the archive was read)."""
        return self._data[name]

    def members(self, modality: str) -> list[str]:
        """Names of the members of ``modality``, in archive order."""
        return [n for n, m in self.modality.items() if m == modality]

    def summary(self) -> dict[str, Any]:
        """Counts and bytes per modality, and the member total."""
        per: dict[str, dict[str, int]] = {}
        for n, m in self.modality.items():
            entry = per.setdefault(m, {"count": 0, "bytes": 0})
            entry["count"] += 1
            entry["bytes"] += len(self._data[n])
        count = {m: e["count"] for m, e in per.items()}.get
        return {
            "archive": self.name,
            "members": len(self._data),
            "bytes": sum(len(v) for v in self._data.values()),
            "modalities": per,
            "errors": sorted(self.errors),
            # cdmltrain 1.1.4's keys
            "zip_path": self.name,
            "total_files": len(self._data),
            "images": count("image", 0),
            "audio_files": count("audio", 0),
            "csv_files": count("csv", 0),
            "json_files": count("json", 0),
            "text_files": count("text", 0),
            "tabular_files": count("csv", 0) + count("json", 0),
            "manifest_present": self.manifest is not None,
        }

    # -- decoded --------------------------------------------------------------------------
    def _decoded(self, modality: str, **opts: Any) -> dict[str, Any]:
        """Every member of ``modality`` decoded with ``opts``, in archive order.

        Only the options that apply to the modality's decoder are passed; memoised per
        modality and options.
        """
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

    def get_images(
        self, target_size: TargetSize = None, *, as_pil: bool = True, by_member: bool = False
    ) -> Any:
        """RGB ``PIL.Image`` objects per image member, as cdmltrain (resized to ``target_size``).

        Pillow is imported here (the ``full`` extra); ``as_pil=False`` gives uint8 ``H×W×3``
        RGB arrays instead, and needs no Pillow (what the appliance asks for);
        ``by_member`` gives ``{member: array}``.
        """
        arrays: dict[str, np.ndarray] = self._decoded("image", target_size=target_size)
        if by_member:
            return arrays
        return views.pil_images(arrays) if as_pil else list(arrays.values())

    def get_audio(
        self,
        n_mfcc: int = 20,
        *,
        sample_rate: int = 16000,
        mode: str = "mfcc",
        hop_length: int = 512,
        n_fft: int = 2048,
        by_member: bool = False,
    ) -> Any:
        """float32 MFCCs ``(n_mfcc, frames)`` (or waveforms) per audio member.

        Records ``{"filename", "mfcc", "mfcc_mean", "sample_rate", "frames"}`` (``{"filename",
        "waveform", "sample_rate", "duration_s"}`` with ``mode="waveform"``), or
        ``{member: array}`` with ``by_member``.
        """
        arrays: dict[str, np.ndarray] = self._decoded(
            "audio",
            sample_rate=sample_rate,
            mode=mode,
            n_mfcc=n_mfcc,
            hop_length=hop_length,
            n_fft=n_fft,
        )
        return arrays if by_member else views.audio_records(arrays, sample_rate, mode)

    def get_csv(self, *, by_member: bool = False) -> Any:
        """Rows of every CSV member as dicts, or ``{member: CsvTable}``."""
        tables: dict[str, CsvTable] = self._decoded("csv")
        return tables if by_member else views.csv_rows(tables)

    def get_tabular(self, *, by_member: bool = False) -> Any:
        """CSV rows then flattened JSON records as dicts (cdmltrain's form).

        With ``by_member``: float32 2-D arrays of every CSV and time-series member.
        """
        if not by_member:
            return views.tabular_rows(self._decoded("csv"), self._decoded("json"))
        out: dict[str, np.ndarray] = {n: t.values for n, t in self._decoded("csv").items()}
        out.update(self._decoded("timeseries"))
        return {n: out[n] for n in self._data if n in out}

    def get_json(self, flatten: bool = False, *, by_member: bool = False) -> Any:
        """Parsed JSON: a list, or ``{member: value}``.

        In the list, a top-level array gives its elements; ``flatten`` makes nested dicts flat.
        """
        values: dict[str, Any] = self._decoded("json")
        return values if by_member else views.json_records(values, flatten)

    def get_text(self, clean: bool = True, *, by_member: bool = False) -> Any:
        """Records ``{"filename", "lines", "line_count", "word_count", "raw_text"}``.

        Blank lines dropped with ``clean``; ``{member: TextData}`` with ``by_member``.
        """
        texts: dict[str, TextData] = self._decoded("text")
        return texts if by_member else views.text_records(texts, clean)

    def get_binary(self) -> dict[str, bytes]:
        """``{member: bytes}`` of members of no known type."""
        return self._decoded("binary")

    def get_all(
        self,
        target_size: TargetSize = None,
        n_mfcc: int = 20,
        *,
        as_pil: bool = True,
        by_member: bool = False,
    ) -> dict[str, Any]:
        """cdmltrain 1.1.4's ``{"images", "audio", "csv", "json", "text"}`` lists.

        Images as :meth:`get_images` gives them (``as_pil=False``: arrays). With
        ``by_member``, every modality present as ``{modality: {member: value}}``.
        """
        if not by_member:
            return {
                "images": self.get_images(target_size, as_pil=as_pil),
                "audio": self.get_audio(n_mfcc),
                "csv": self.get_csv(),
                "json": self.get_json(),
                "text": self.get_text(),
            }
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
