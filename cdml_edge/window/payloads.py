"""The MQTT payload models and the stable result id.

Every message the agent publishes is one of the pydantic models below, serialised with
``model_dump_json()`` into a :class:`~cdml_edge.window.topics.OutMessage`. Subscribers dedupe
results on ``ItemResult.id`` (:func:`item_id`).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from cdml_edge import release

CameraStateName = Literal["connecting", "streaming", "reconnecting", "failed", "ended", "stopped"]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StatusPayload(_Payload):
    """Retained ``{prefix}/{device}/status``; ``offline`` is the Last Will."""

    state: Literal["online", "offline"]
    version: str
    started_at: float = Field(description="Unix time the agent started (s)")
    device: str
    release: str | None = Field(
        default_factory=lambda: release.current().release,
        description="Release installed by install.sh (None outside an installed release)",
    )
    lock: Literal["match", "differs", "none"] = Field(
        default_factory=lambda: release.current().lock_state,  # type: ignore[arg-type]
        description="Whether the venv's packages match the lock it was installed from",
    )


class _Optional(_Payload):
    """A payload whose optional extras (:attr:`_EXTRAS`) are left out of the JSON when unset.

    So a message of a model without them reads as it always did.
    """

    _EXTRAS: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        return {k: v for k, v in doc.items() if not (k in self._EXTRAS and v is None)}


class LabelScore(_Payload):
    """One label of a classifier's top k."""

    label: str
    score: float = Field(description="Probability")


class DetectionPayload(_Payload):
    """One detected object; the box in the source image's pixels."""

    label: str
    score: float
    box: tuple[float, float, float, float] = Field(description="x1, y1, x2, y2 in source pixels")


class ModelVerdict(_Optional):
    """What one model said about an item (``ItemResult.models``, keyed by model name)."""

    _EXTRAS: ClassVar[frozenset[str]] = frozenset({"top_k", "detections"})

    model: str
    model_version: str | None = None
    kind: str = Field(description="spec | classifier | anomaly | embedding | detector")
    label: str | None = None
    score: float | None = None
    anomaly: bool = False
    anomaly_score: float | None = None
    top_k: list[LabelScore] | None = None
    detections: list[DetectionPayload] | None = None


class ItemResult(_Optional):
    """One scored item on ``{prefix}/{device}/{source}/result``."""

    id: str = Field(
        description="Stable id for dedupe: item_id(source, name, size, mtime_ns, content CRC-32)"
    )
    window_id: str
    source: str
    item: str = Field(description="File name / member name of the item")
    modality: str
    ts: float = Field(description="Item timestamp, unix seconds")
    label: str | None = None
    score: float | None = None
    anomaly: bool = False
    anomaly_score: float | None = None
    latency_ms: float
    model: str
    model_version: str | None = None
    seq: int
    device: str
    top_k: list[LabelScore] | None = Field(
        default=None, description="Classifier with top_k > 1: the best labels, best first"
    )
    detections: list[DetectionPayload] | None = Field(
        default=None, description="Detector: the objects found, best first"
    )
    models: dict[str, ModelVerdict] | None = Field(
        default=None,
        description="A source scored by several models: each one's verdict by name "
        "(label/score above come from the first; anomaly is set when any model flags one)",
    )

    _EXTRAS: ClassVar[frozenset[str]] = frozenset({"top_k", "detections", "models"})


class WindowTimings(_Payload):
    """Where the time of one window went (milliseconds)."""

    pack_ms: float = 0.0
    read_ms: float = 0.0
    decode_ms: float = 0.0
    infer_ms: float = 0.0
    total_ms: float = 0.0


class ArchiveInfo(_Payload):
    """The archive a window was packed into."""

    name: str
    format: Literal["zip", "tar.zst"]
    bytes: int
    sha256: str


class WindowResult(_Optional):
    """One closed window on ``{prefix}/{device}/{source}/window``."""

    _EXTRAS: ClassVar[frozenset[str]] = frozenset({"models", "results"})

    window_id: str
    source: str
    counts: dict[str, int] = Field(
        default_factory=dict,
        description="Items per label (modality when unlabelled), detections per class for a "
        "detector; error: items that failed",
    )
    models: dict[str, dict[str, int]] | None = Field(
        default=None, description="A source scored by several models: the counts of each, by name"
    )
    items: int = 0
    errors: int = 0
    archive: ArchiveInfo | None = None
    opened_ts: float
    closed_ts: float
    timings: WindowTimings = Field(default_factory=WindowTimings)
    seq: int
    device: str
    results: list[ItemResult] | None = Field(
        default=None,
        description="mqtt.results: window: the window's item results, each as it would have "
        "been published alone on {source}/result (which is then not published), in order",
    )


class CameraHealth(_Payload):
    """One camera in the health payload (``cameras``, keyed by source name)."""

    state: CameraStateName
    url: str = Field(description="Device, stream URL or file; the password replaced by ***")
    since: float = Field(description="Unix time the camera entered this state")
    fps_captured: float = Field(description="Frames/s taken from the camera, last >= 5 s")
    fps_scored: float = Field(description="Results/s of this camera, last >= 5 s")
    frames: int = Field(description="Frames received since the agent started")
    last_frame_age_s: float | None = Field(description="Seconds since the last frame")
    down_for_s: float | None = Field(description="Seconds without frames while down, else null")
    outages: int
    reconnects: int = Field(description="Outages that ended with frames flowing again")
    failed_attempts: int = Field(description="Opens or reads that failed, all outages")
    last_error: str | None = None
    unhealthy: bool = Field(description="Down longer than the source's unhealthy_after")
    lag_s: float | None = Field(
        None, description="Seconds the grabs run behind the stream's clock (RTSP), else null"
    )
    fell_behind: int = Field(0, description="Times the grabs fell 1 s or more behind")


class CameraEvent(_Payload):
    """Retained ``{prefix}/{device}/{source}/camera``: one per state change of a camera.

    A state change: down, failed past its grace, streaming again, ended, stopped; never one
    per retry.
    """

    source: str
    state: CameraStateName
    previous: CameraStateName
    reason: str | None = Field(None, description="Why it went down / what the outage was")
    down_for_s: float | None = Field(None, description="Outage so far, or in all on recovery")
    outages: int
    reconnects: int
    failed_attempts: int
    url: str
    ts: float
    seq: int
    device: str


class HealthPayload(_Payload):
    """Periodic counters on ``{prefix}/{device}/health``."""

    items: int = 0
    windows: int = 0
    errors: int = 0
    queue_depths: dict[str, int] = Field(default_factory=dict)
    outbox_depth: int = 0
    outbox_bytes: int = 0
    spool_bytes: int = 0
    spool_records: int = 0
    bytes_written: int = 0
    dropped: int = 0
    broker_connected: bool = False
    thread_deaths: int = Field(0, description="Supervised threads that died (restarted)")
    dead_threads: list[str] = Field(
        default_factory=list, description="Supervised threads dead now: not running again yet"
    )
    uptime_s: float = 0.0
    cameras: dict[str, CameraHealth] = Field(default_factory=dict)
    degraded: dict[str, str] = Field(
        default_factory=dict, description="Parts not fully working now (spool, retention) and why."
    )
    seq: int
    device: str


class ErrorEvent(_Payload):
    """An item that failed, on ``{prefix}/{device}/{source}/error``."""

    source: str
    item: str | None = None
    error_type: str
    message: str
    quarantined_path: str | None = None
    ts: float
    seq: int
    device: str


PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "status": StatusPayload,
    "result": ItemResult,
    "window": WindowResult,
    "health": HealthPayload,
    "error": ErrorEvent,
    "camera": CameraEvent,
}


def item_id(
    source: str, name: str, size: int, mtime_ns: int, *, content: bytes | None = None
) -> str:
    """Stable result id: the same file seen twice (after a restart) gets the same id.

    ``name`` may hold raw bytes that are not UTF-8 (``os.fsdecode``): they are hashed as such.
    ``content``: the file's bytes, whose CRC-32 joins the key, so that two files with the same
    name, size and mtime (copied with their mtime, a coarse clock) get different ids.
    """
    key = f"{source}\x00{name}\x00{size}\x00{mtime_ns}"
    if content is not None:
        key += f"\x00{zlib.crc32(content):08x}"
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def payload_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema of every payload, keyed by topic kind."""
    return {kind: model.model_json_schema() for kind, model in PAYLOAD_MODELS.items()}
