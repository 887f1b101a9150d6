"""``manifest.json``: what is inside every window archive, and what the model said about it.

The packer writes a :class:`WindowManifest` (without results) as the member
``manifest.json`` of each window archive. Once the window has been scored, the retention
ring keeps the same manifest with :attr:`WindowManifest.results` filled in beside the
archive. Serialisation is canonical (sorted keys, compact separators, UTF-8), so the same
manifest always gives the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cdml_edge.errors import CdmlError

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1


class ManifestError(CdmlError, ValueError):
    """A ``manifest.json`` that cannot be parsed or validated; names where it came from."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: invalid {MANIFEST_NAME}: {reason}")
        self.where = where
        self.reason = reason

    def __reduce__(self) -> tuple[type[ManifestError], tuple[str, str]]:
        # picklable across processes (two-argument __init__)
        return (type(self), (self.where, self.reason))


def first_invalid(exc: ValidationError) -> tuple[str, str]:
    """The dotted field and the message of the first problem a validation found."""
    first = exc.errors()[0]
    return ".".join(str(p) for p in first["loc"]), first["msg"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ManifestItem(_Model):
    """One file of the window, as it was packed."""

    id: str = Field(description="Stable item id: item_id(source, name, size, mtime_ns, CRC-32)")
    member: str = Field(description="Member name inside the archive")
    name: str = Field(description="Original file name at the source")
    size: int = Field(ge=0, description="Size in bytes")
    mtime_ns: int = Field(description="Source file mtime, nanoseconds since the epoch")
    ts: float = Field(description="Item timestamp, unix seconds")
    sha256: str = Field(description="SHA-256 of the member bytes (hex)")
    modality: str | None = Field(default=None, description="Overrides the window modality")


class ItemOutcome(_Model):
    """What the model said about one item (or why it could not)."""

    label: str | None = None
    score: float | None = None
    anomaly: bool = False
    anomaly_score: float | None = None
    error: str | None = Field(default=None, description="Error type if the item failed")


class WindowManifest(_Model):
    """The ``manifest.json`` inside a window archive."""

    format_version: int = FORMAT_VERSION
    window_id: str
    device: str
    site: str | None = None
    source: str
    modality: str
    archive_format: Literal["zip", "tar.zst"] = "zip"
    opened_at: float = Field(description="Unix time the window opened (s)")
    closed_at: float = Field(description="Unix time the window closed (s)")
    items: tuple[ManifestItem, ...] = ()
    model: str | None = Field(default=None, description="Model name that scored the window")
    model_version: str | None = None
    results: dict[str, ItemOutcome] = Field(
        default_factory=dict, description="Per-item outcome keyed by item id"
    )

    @field_validator("items")
    @classmethod
    def _each_member_once(cls, items: tuple[ManifestItem, ...]) -> tuple[ManifestItem, ...]:
        """A member listed twice is refused: it would be read, decoded and scored again."""
        if len({it.member for it in items}) == len(items):
            return items
        member, n = Counter(it.member for it in items).most_common(1)[0]
        raise ValueError(f"member {member[:200]!r} listed {n} times (each member once)")

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes (sorted keys, compact, UTF-8, trailing newline)."""
        doc = self.model_dump(mode="json")
        return (
            json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
        ).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str = MANIFEST_NAME) -> WindowManifest:
        """Parse and validate; raise :class:`ManifestError` naming ``where`` on failure."""
        try:  # one pass in pydantic's JSON parser; the checks below only name a failure
            fast = cls.model_validate_json(data)
        except ValidationError:
            pass
        else:
            if fast.format_version <= FORMAT_VERSION:
                return fast
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError(where, f"not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise ManifestError(where, "top level is not an object")
        version = doc.get("format_version", FORMAT_VERSION)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ManifestError(where, f"unsupported format_version {version!r}")
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            field, msg = first_invalid(exc)
            raise ManifestError(where, f"field {field!r}: {msg}") from exc

    def with_results(
        self,
        results: dict[str, ItemOutcome],
        model: str | None = None,
        model_version: str | None = None,
    ) -> WindowManifest:
        """A copy with ``results`` (and the model that produced them) filled in."""
        unknown = set(results) - {it.id for it in self.items}
        if unknown:
            raise ManifestError(
                f"window {self.window_id}", f"results for unknown item ids {sorted(unknown)[:3]}"
            )
        return self.model_copy(
            update={
                "results": dict(results),
                "model": model if model is not None else self.model,
                "model_version": model_version if model_version is not None else self.model_version,
            }
        )

    def item(self, item_id: str) -> ManifestItem:
        """The item with ``item_id``; ``KeyError`` naming the window if absent."""
        for it in self.items:
            if it.id == item_id:
                return it
        raise KeyError(f"window {self.window_id}: no item {item_id!r}")

    @property
    def anomalies(self) -> int:
        """Number of items flagged anomalous in :attr:`results`."""
        return sum(1 for r in self.results.values() if r.anomaly)
