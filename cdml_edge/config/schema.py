"""The sections of ``factory.yaml`` as pydantic models (schema only: no I/O, no other layers).

Every model forbids unknown keys. Sizes accept ``64MiB``-style strings, durations ``2s`` or
``500ms``. Relative paths are resolved against the folder of the configuration file (passed
as the validation context ``base_dir`` by :func:`~cdml_edge.config.loading.load_config`).
The folders of the agent's state (spool, quarantine, retention) default to ``state_dir``
(see :func:`default_state_dir`).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from cdml_edge.config.model_section import ModelConfig
from cdml_edge.config.mqtt_names import prefix_problem, string_problem
from cdml_edge.modality import SOURCE_MODALITIES, SourceModality, model_fits
from cdml_edge.units import (
    DURATION_PATTERN,
    MAX_SIZE,
    SIZE_PATTERN,
    parse_duration,
    parse_size,
)

Modality = SourceModality  # what a source produces, a model is configured for
MODALITIES: tuple[str, ...] = SOURCE_MODALITIES


@dataclass(frozen=True)
class _QuantitySchema:
    """The JSON Schema of a quantity given as a number or as text with a unit.

    The text's ``pattern`` is the parser's own (:data:`~cdml_edge.units.SIZE_PATTERN`,
    :data:`~cdml_edge.units.DURATION_PATTERN`); the number carries the field's bounds
    (``gt``/``ge`` of its ``Field``) and the quantity's ``maximum``. A pattern cannot bound
    the value of a text: ``"0"`` or ``"3651d"`` pass it and the loader refuses them.
    """

    json_type: str
    pattern: str
    maximum: float
    description: str

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        bounds = _number_bounds(core_schema)
        most = min(self.maximum, bounds.pop("maximum", self.maximum))
        number: dict[str, Any] = {"type": self.json_type, "maximum": most, **bounds}
        text = {"type": "string", "pattern": self.pattern}
        return {"anyOf": [number, text], "description": self.description}


_JSON_BOUNDS = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
}


def _number_bounds(core_schema: Any) -> dict[str, Any]:
    """The ``gt``/``ge``/``lt``/``le`` of a quantity's number, as JSON Schema.

    Pydantic puts a bound in the number's own schema, or, given outside the quantity's
    validators (``Annotated[Duration, Field(gt=0)] | None``), in a validator after them
    (``partial(greater_than_validator, gt=0)``): both are read.
    """
    out: dict[str, Any] = {}
    while isinstance(core_schema, dict):
        fn = core_schema.get("function")
        bound = getattr(fn.get("function") if isinstance(fn, dict) else None, "keywords", None)
        bound = bound if isinstance(bound, dict) else {}
        for where in (core_schema, bound):
            out.update({_JSON_BOUNDS[k]: v for k, v in where.items() if k in _JSON_BOUNDS})
        core_schema = core_schema.get("schema")
    return out


MAX_DURATION_S = 10 * 365 * 86400.0
"""The longest duration taken (ten years): a wait much longer overflows the platform's clock
(Python's ``threading.TIMEOUT_MAX``), which would kill the thread that waits, in a loop."""


def _bounded_duration(seconds: float) -> float:
    """A duration of at most :data:`MAX_DURATION_S`."""
    if seconds > MAX_DURATION_S:
        raise ValueError(
            f"{seconds:g} s is longer than the {MAX_DURATION_S / 86400:g} days a duration may be"
        )
    return seconds


Size = Annotated[
    int,
    BeforeValidator(parse_size),
    _QuantitySchema(
        "integer", SIZE_PATTERN, MAX_SIZE, "bytes, or a string such as '512KiB', '64MiB', '2GB'"
    ),
]
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    AfterValidator(_bounded_duration),
    _QuantitySchema(
        "number",
        DURATION_PATTERN,
        MAX_DURATION_S,
        "seconds, or a string such as '500ms', '2s', '5min', '7d'",
    ),
]
"""Bounds of an optional size or duration go inside, ``Annotated[Duration, Field(gt=0)] | None``:
given on the ``| None``, pydantic cannot put them in the JSON Schema of the number."""

TOPIC_SAFE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""Names that are an MQTT topic level: device id, source and model names, Sparkplug ids."""
_TOPIC_SAFE = TOPIC_SAFE


STATE_FOLDERS = ("spool", "quarantine", "retention")
"""Sections whose ``dir`` defaults to ``<state_dir>/<section>``."""


def _in_state(name: str) -> dict[str, Any]:
    """The reference table's default of a state folder."""
    return {"x-default": f"<state_dir>/{name}"}


def default_state_dir(
    base_dir: Path | None, config_name: str | None, state_directory: str | None = None
) -> Path:
    """Where the agent keeps its state when ``state_dir`` is not set.

    Systemd's ``$STATE_DIRECTORY`` (its first folder; ``state_directory`` stands in for it),
    else ``<config name>.state`` beside the configuration file, else ``cdml-edge.state`` in
    the working directory (a configuration parsed without a file).
    """
    given = state_directory or os.environ.get("STATE_DIRECTORY", "")
    env = [p for p in given.split(":") if p]
    if env:
        return Path(env[0])
    if base_dir is not None and config_name:
        return Path(base_dir) / f"{Path(config_name).stem}.state"
    return Path.cwd() / "cdml-edge.state"


def _resolve_path(value: Path | None, info: ValidationInfo) -> Path | None:
    if value is None:
        return None
    value = Path(os.path.expanduser(str(value)))
    base = (info.context or {}).get("base_dir") if info.context else None
    if base is not None and not value.is_absolute():
        return Path(base) / value
    return value


class _ConfigSection(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class DeviceConfig(_ConfigSection):
    """Who this appliance is: the id appears in every MQTT topic."""

    id: str = Field(
        "edge-1", pattern=_TOPIC_SAFE, description="Device id; used in topics and the client id."
    )
    site: str | None = Field(None, description="Site / line name, copied into payloads.")


class WindowConfig(_ConfigSection):
    """When a window closes: whichever limit is reached first."""

    seconds: Duration = Field(1.0, gt=0, description="Close a window this long after it opened.")
    max_items: int = Field(64, ge=1, description="Close after this many items; 1 = instant mode.")
    max_bytes: Size = Field(16 * 1024**2, gt=0, description="Close once the items reach this size.")
    close_when_idle: bool = Field(
        True,
        description="Also close as soon as a pipeline worker is free (dynamic batching): "
        "items are scored on arrival at low rates and batch up while the workers are busy.",
    )


class SourceConfig(_ConfigSection):
    """One input: a watched folder or a camera."""

    name: str = Field(..., pattern=_TOPIC_SAFE, description="Source name; used in topics.")
    kind: Literal["folder", "camera"] = Field("folder", description="folder | camera")
    path: Path | None = Field(None, description="Folder to watch (kind: folder).")
    url: str | int | None = Field(
        None,
        description="Camera: device index or /dev path, RTSP/HTTP URL, GStreamer pipeline "
        "or video file (kind: camera).",
    )
    modality: Modality = Field(..., description=" | ".join(MODALITIES))
    patterns: list[str] = Field(
        default_factory=list,
        description="Glob patterns of files to take; empty = by the modality's extensions.",
    )
    window: WindowConfig = Field(default_factory=WindowConfig)
    on_done: Literal["delete", "move", "keep"] = Field(
        "keep", description="What happens to a source file once its results are safe."
    )
    move_to: Path | None = Field(None, description="Destination folder for on_done: move.")
    fps: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Camera frames per second to take."
    )
    jpeg_quality: int = Field(90, ge=1, le=100, description="Camera frames: JPEG quality.")
    backend: Literal["auto", "ffmpeg", "v4l2", "gstreamer"] = Field(
        "auto",
        description="Camera: OpenCV backend; auto = V4L2 for an index or /dev path, "
        "GStreamer for a pipeline (' ! '), else FFmpeg.",
    )
    rtsp_transport: Literal["tcp", "udp"] = Field(
        "tcp", description="Camera: RTSP over TCP (survives lossy links) or UDP."
    )
    loop: bool = Field(False, description="Camera: play a video file again at its end.")
    open_timeout: Duration = Field(
        10.0, gt=0, description="Camera: an open that takes longer is abandoned and retried."
    )
    read_timeout: Duration = Field(
        5.0, gt=0, description="Camera: no frame for this long is a stall; the capture reopens."
    )
    reconnect_first: Duration = Field(
        0.5,
        gt=0,
        description="Camera: first wait before a reconnect (doubling up to reconnect_max).",
    )
    reconnect_max: Duration = Field(
        30.0,
        gt=0,
        description="Camera: longest wait between reconnects (from reconnect_first, doubling).",
    )
    unhealthy_after: Duration = Field(
        60.0, gt=0, description="Camera: down this long = state failed and /healthz 503."
    )
    stable_seconds: Duration = Field(
        0.5,
        ge=0,
        description="Without a close-write: a file is complete once the agent has seen it "
        "unchanged for this long (files present at start too).",
    )
    settle: Duration = Field(
        0.0,
        ge=0,
        description="Folder: a file complete by its close-write (or rename) is taken only after "
        "this long without another write or close-write (writers that close and reopen to "
        "append); adds this much latency. 0 = taken on its close-write.",
    )
    polling: bool = Field(
        False, description="Use a polling observer (network mounts) instead of inotify."
    )
    segment_rows: int | None = Field(
        None, gt=0, description="csv/timeseries: one result per this many rows (default per file)."
    )
    follow_symlinks: bool = Field(
        False,
        description="Follow symbolic links, only to files inside the folder or link_roots; "
        "off: links are reported once and left.",
    )
    link_roots: list[Path] = Field(
        default_factory=list, description="Folders a followed link may lead into."
    )
    models: list[str] | None = Field(
        None,
        description="Names of the models (keys of models) that score this source, the first "
        "giving the result's label; unset: every model of the source's modality.",
    )

    _resolve = field_validator("path", "move_to")(_resolve_path)

    @field_validator("url", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        """YAML's ``yes``/``no``/``on``/``off``/``true`` would pass as device 1 or 0."""
        if isinstance(value, bool):
            raise ValueError(f"must be a device index, a path or a URL, not {value!r}")
        return value

    @field_validator("url")
    @classmethod
    def _resolve_video_file(cls, value: str | int | None, info: ValidationInfo) -> str | int | None:
        """A relative video file resolves as every path does; other URLs are left as written.

        A file is a string with no scheme (``://``), no GStreamer ``!`` and not a device
        index.
        """
        if isinstance(value, int):
            if value < 0:
                raise ValueError("a device index is 0 or more (0 is /dev/video0)")
            return value
        if value is None:
            return value
        text = value.strip()  # as the capture reads it: " 0" is device 0
        if not text:
            raise ValueError("is empty: give a device index, a path or a URL")
        if "://" in text or "!" in text or text.isdigit():
            return value
        return str(_resolve_path(Path(value), info))

    @field_validator("link_roots")
    @classmethod
    def _resolve_roots(cls, value: list[Path], info: ValidationInfo) -> list[Path]:
        return [p for p in (_resolve_path(v, info) for v in value) if p is not None]

    @model_validator(mode="after")
    def _check_kind(self) -> SourceConfig:
        if self.kind == "folder" and self.path is None:
            raise ValueError("a folder source needs 'path'")
        if self.kind == "camera" and self.url is None:
            raise ValueError("a camera source needs 'url' (device index, stream URL or file)")
        if self.kind == "camera" and self.modality != "image":
            raise ValueError(
                f"modality: a camera gives JPEG frames: its modality is image, not {self.modality}"
            )
        if self.kind == "camera" and self.reconnect_first > self.reconnect_max:
            raise ValueError(
                f"reconnect_first ({self.reconnect_first:g} s) is longer than reconnect_max "
                f"({self.reconnect_max:g} s)"
            )
        if self.on_done == "move" and self.move_to is None:
            raise ValueError("on_done is 'move' but 'move_to' is not set")
        return self


class PackConfig(_ConfigSection):
    """How windows are packed in memory."""

    format: Literal["zip", "tar.zst"] = Field("zip", description="zip | tar.zst (seekable)")
    level: int = Field(3, ge=0, le=22, description="Compression level (zip: 0-9, zstd: 1-22).")

    @model_validator(mode="after")
    def _check_level(self) -> PackConfig:
        if self.format == "zip" and self.level > 9:
            raise ValueError("level: zip levels go from 0 to 9")
        if self.format == "tar.zst" and self.level < 1:
            raise ValueError("level: zstd levels go from 1 to 22")
        return self


class TlsConfig(_ConfigSection):
    """TLS to the broker; mutual TLS when cert and key are given."""

    ca: Path | None = Field(None, description="CA bundle that signed the broker certificate.")
    cert: Path | None = Field(None, description="Client certificate (mTLS).")
    key: Path | None = Field(None, description="Client private key (mTLS).")
    insecure: bool = Field(False, description="Skip certificate checks. Never in production.")

    _resolve = field_validator("ca", "cert", "key")(_resolve_path)

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if (self.cert is None) != (self.key is None):
            raise ValueError("'cert' and 'key' go together: give both for mutual TLS, or neither")
        return self


class SparkplugConfig(_ConfigSection):
    """Sparkplug B identity: ``spBv1.0/{group_id}/{type}/{node_id}/{source}``."""

    group_id: str = Field("cdml", pattern=_TOPIC_SAFE, description="Sparkplug group id.")
    node_id: str | None = Field(
        None, pattern=_TOPIC_SAFE, description="Edge node id; default: device.id."
    )


ResultsMode = Literal["item", "window"]
"""``mqtt.results``: a message per item, or the items inside their window's message."""


class MqttConfig(_ConfigSection):
    """The broker results are published to."""

    url: str = Field(
        "mqtt://127.0.0.1:1883",
        description="mqtt://host:port, mqtts://host:port, or 'embedded' (in-process broker).",
    )
    topic_prefix: str = Field("cdml", description="First topic level: {prefix}/{device}/...")
    qos: Literal[0, 1, 2] = Field(1, description="QoS of result messages.")
    client_id: str | None = Field(None, description="Default: cdml-edge-{device.id}.")
    protocol: Literal["5", "3.1.1"] | None = Field(
        None, description="MQTT version; default 5, and 3.1.1 for the embedded broker."
    )
    keepalive: Duration = Field(30.0, gt=0, description="MQTT keepalive.")
    session_expiry: Duration = Field(
        3600.0,
        ge=0,
        description="MQTT 5 session expiry: QoS 1 in flight survives reconnects. Not used "
        "with `format: sparkplug_b` (a clean session, as Sparkplug B asks).",
    )
    username: str | None = None
    password_file: Path | None = Field(None, description="File holding the password.")
    password_env: str | None = Field(None, description="Environment variable with the password.")
    password: str | None = Field(
        None, description="Clear-text password; refused unless allow_plaintext_password."
    )
    allow_plaintext_password: bool = False
    tls: TlsConfig | None = None
    format: Literal["json", "sparkplug_b"] = Field(
        "json",
        description="json: our topics and JSON payloads; sparkplug_b: Eclipse Sparkplug B "
        "(needs the sparkplug extra).",
    )
    sparkplug: SparkplugConfig = Field(
        default_factory=SparkplugConfig, description="Used with format: sparkplug_b."
    )
    discovery: Literal["homeassistant"] | None = Field(
        None, description="homeassistant: retained MQTT discovery configs for each source."
    )
    discovery_prefix: str = Field(
        "homeassistant", pattern=_TOPIC_SAFE, description="First topic level of discovery."
    )
    results: ResultsMode = Field(
        "item",
        description="item: one {source}/result message per scored item beside the window "
        "message; window: no result messages, each {source}/window message carries its "
        "items' results in 'results' (one publish per window; needs format: json, "
        "no discovery).",
    )

    _resolve = field_validator("password_file")(_resolve_path)

    @field_validator("qos", mode="before")
    @classmethod
    def _qos_not_boolean(cls, value: object) -> object:
        """YAML's ``on``/``off``/``yes``/``no`` would pass as QoS 1 or 0."""
        if isinstance(value, bool):
            raise ValueError(f"must be 0, 1 or 2, not {value!r}")
        return value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        host = r"(\[[0-9A-Fa-f:.]+\]|[^/:\[\]]+)"
        if value == "embedded":
            return value
        match = re.match(rf"^(mqtt|mqtts|tcp|ssl)://{host}(:(\d+))?/?$", value)
        if match and match.group(4) is not None and not 0 < int(match.group(4)) <= 65535:
            raise ValueError(f"port {match.group(4)} is not a TCP port (1 to 65535)")
        if match:
            return value
        raise ValueError("must be 'embedded' or mqtt[s]://host[:port]")

    @field_validator("topic_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        problem = prefix_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value.rstrip("/")

    @field_validator("client_id", "username")
    @classmethod
    def _check_mqtt_string(cls, value: str | None) -> str | None:
        problem = None if value is None else string_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _check_discovery(self) -> MqttConfig:
        if self.discovery is not None and self.format != "json":
            raise ValueError(
                "discovery: needs format: json (its availability is the JSON status topic, "
                "whose Last Will sparkplug_b replaces with NDEATH)"
            )
        return self

    @model_validator(mode="after")
    def _check_results(self) -> MqttConfig:
        if self.results == "window" and self.format != "json":
            raise ValueError(
                "results: window needs format: json (Sparkplug B's result metrics are one "
                "DDATA per item)"
            )
        if self.results == "window" and self.discovery is not None:
            raise ValueError(
                "results: window cannot go with discovery: homeassistant (its label and "
                "score sensors read the {source}/result topic, which is then not published)"
            )
        return self

    @model_validator(mode="after")
    def _check_password(self) -> MqttConfig:
        if self.password is not None and not self.allow_plaintext_password:
            raise ValueError(
                "password: a clear-text password is refused; use password_file or password_env "
                "(or set allow_plaintext_password: true)"
            )
        return self


class OutboxConfig(_ConfigSection):
    """In-memory queue between the pipeline and the MQTT client."""

    max_bytes: Size = Field(8 * 1024**2, gt=0, description="Above this, messages go to the spool.")


class SpoolConfig(_ConfigSection):
    """On-disk spool used while the broker is away."""

    dir: Path = Field(
        Path("spool"), description="Spool folder.", json_schema_extra=_in_state("spool")
    )
    max_bytes: Size = Field(256 * 1024**2, gt=0, description="Byte bound of the spool.")
    policy: Literal["drop_oldest", "block"] = Field(
        "drop_oldest", description="When full: drop the oldest records, or block intake."
    )
    fsync: Literal["always", "batch", "never"] = Field(
        "batch", description="fsync every record, every batch (window), or never."
    )

    _resolve = field_validator("dir")(_resolve_path)


def _quoted_mode(value: object) -> object:
    """A file mode must be written as text: YAML reads 0640 as the number 416."""
    if not isinstance(value, str):
        raise ValueError("write the mode as a quoted octal string, such as '0640'")
    return value


def _mode_field(description: str) -> Any:
    """The ``mode`` field of a section that writes files: octal text, owner-only by default."""
    return Field("0600", pattern=r"^0?[0-7]{3}$", description=description)


class _WritesFiles(_ConfigSection):
    """A section whose files get its ``mode``.

    Each section declares the field, with its own description, where it stands in the section.
    """

    if TYPE_CHECKING:
        mode: str

    _quoted = field_validator("mode", mode="before", check_fields=False)(_quoted_mode)

    @property
    def file_mode(self) -> int:
        """The mode of the section's files as a number."""
        return int(self.mode, 8)


class RetentionConfig(_WritesFiles):
    """Bounded on-disk ring of window archives, for replay and training export."""

    dir: Path = Field(
        Path("retention"), description="Retention folder.", json_schema_extra=_in_state("retention")
    )
    max_bytes: Size = Field(
        1024**3,
        gt=0,
        description=(
            "Oldest windows are evicted above this disk space (files in whole blocks, the "
            "catalog included)."
        ),
    )
    max_age: Annotated[Duration, Field(gt=0)] | None = Field(
        None, description="Windows older than this go."
    )
    keep: Literal["all", "anomalies", "sample", "none"] = Field(
        "all", description="Which windows to keep."
    )
    sample_percent: float = Field(10.0, ge=0, le=100, description="keep: sample — percentage.")
    required: bool = Field(
        True,
        description="Source files wait until the ring kept their window (false: a window the "
        "ring could not write, e.g. on a full disk, releases its files anyway).",
    )

    mode: str = _mode_field(
        "Octal permissions of archives, sidecars and catalog (folders: x where r)."
    )

    _resolve = field_validator("dir")(_resolve_path)


class QuarantineConfig(_WritesFiles):
    """Where bad inputs are moved."""

    dir: Path = Field(
        Path("quarantine"),
        description="Quarantine folder.",
        json_schema_extra=_in_state("quarantine"),
    )
    max_bytes: Size = Field(
        256 * 1024**2,
        gt=0,
        description=(
            "Above this disk space (files in whole blocks), the oldest quarantined files are "
            "deleted."
        ),
    )
    mode: str = _mode_field(
        "Octal permissions of quarantined files (folders get x where r is set)."
    )

    _resolve = field_validator("dir")(_resolve_path)


class LimitsConfig(_ConfigSection):
    """Global bounds; the decode bounds apply to each member, from its header, before decoding."""

    max_inflight_bytes: Size = Field(
        64 * 1024**2, gt=0, description="Above this, intake pauses (files stay on disk)."
    )
    max_pixels: int | None = Field(
        40_000_000, gt=0, description="An image whose header claims more pixels is refused."
    )
    max_jpeg_scans: int | None = Field(
        32, gt=0, description="A JPEG of more scans is refused (each scan is a pass over it)."
    )
    max_audio_seconds: Annotated[Duration, Field(gt=0)] | None = Field(
        600.0, description="Audio whose header claims a longer duration is refused."
    )
    max_decoded_bytes: Annotated[Size, Field(gt=0)] | None = Field(
        256 * 1024**2,
        description="A member whose decode would allocate more (pixels x channels, audio "
        "samples before and after resampling, an array's decompressed size) is refused.",
    )
    max_cells: int | None = Field(
        10_000_000,
        gt=0,
        description="A CSV, array, JSON or text of more cells, values or words is refused.",
    )
    decode_deadline: Annotated[Duration, Field(gt=0)] | None = Field(
        10.0,
        description="CPU seconds a large decode (see isolate_decodes_over) may take in its own "
        "process before it is killed and the file quarantined; unset = decode in-process.",
    )
    isolate_decodes_over: Size = Field(
        32 * 1024**2,
        ge=0,
        description="Decodes that will allocate at least this much (from the header) run in a "
        "killable decoder process under decode_deadline; smaller ones in-process.",
    )


class HealthConfig(_ConfigSection):
    """Health topic, Prometheus endpoint and systemd watchdog."""

    interval: Duration = Field(10.0, gt=0, description="Period of the health topic.")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Prometheus /metrics and /healthz port; unset = off."
    )
    metrics_host: str = Field("127.0.0.1", description="Address the metrics server binds.")
    status_page: bool = Field(
        False,
        description="Also serve a read-only status page at / on metrics_port (last results "
        "with thumbnails, scores, errors, health); bound to metrics_host (loopback).",
    )
    watchdog: bool = Field(
        True,
        description="Send WATCHDOG=1 to systemd while making progress (false: while alive).",
    )
    stall_after: Duration = Field(
        60.0, gt=0, description="Pending work with no progress for this long counts as stalled."
    )

    @model_validator(mode="after")
    def _page_needs_port(self) -> HealthConfig:
        if self.status_page and self.metrics_port is None:
            raise ValueError("status_page is served on metrics_port: set metrics_port")
        return self


class OutputConfig(_ConfigSection):
    """Local JSON-lines output of every message (used when no broker is configured)."""

    jsonl: str | None = Field(None, description="File path, or '-' for stdout.")

    @field_validator("jsonl")
    @classmethod
    def _resolve_jsonl(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value in (None, "-"):
            return value
        resolved = _resolve_path(Path(value), info)
        return str(resolved)


class S3Config(_ConfigSection):
    """Defaults for ``s3://`` archives; credentials come from the standard boto3 chain."""

    endpoint: str | None = Field(
        None, description="S3-compatible endpoint (MinIO, Ceph RGW); env CDML_EDGE_S3_ENDPOINT."
    )
    region: str | None = Field(None, description="Region name.")
    use_index_cache: bool = Field(
        True, description="Keep archive indexes on disk by ETag: a re-open costs one HEAD."
    )
    index_cache: Path | None = Field(
        None,
        description="Folder of the index cache; unset: the user's cache folder "
        "($XDG_CACHE_HOME/cdml-edge/s3-index, by default ~/.cache/cdml-edge/s3-index).",
    )
    index_cache_bytes: Size = Field(256 * 1024**2, gt=0, description="Byte bound of index_cache.")
    min_rate: Size | None = Field(
        None,
        ge=0,
        description="Slowest transfer a request may keep, bytes/s (64KiB): one lasts at most "
        "60 s plus its bytes at this rate, then is retried; 0: no deadline. Unset: "
        "CDML_EDGE_S3_MIN_RATE, else 32KiB.",
    )

    _resolve = field_validator("index_cache")(_resolve_path)


class AppConfig(_ConfigSection):
    """The whole ``factory.yaml``."""

    state_dir: Path | None = Field(
        None,
        description="The agent's state folder: spool, quarantine and retention live here "
        "unless their dir is set; one agent per state folder. Default: $STATE_DIRECTORY "
        "(systemd's StateDirectory=), else '<config name>.state' beside the config file.",
    )
    device: DeviceConfig = Field(default_factory=DeviceConfig)
    sources: list[SourceConfig] = Field(default_factory=list)
    pack: PackConfig = Field(default_factory=PackConfig)
    models: dict[str, ModelConfig] = Field(
        default_factory=dict,
        description="Models by name; a name that is a modality also gives the model's modality.",
    )
    mqtt: MqttConfig | None = Field(None, description="Unset: results go to output.jsonl only.")
    outbox: OutboxConfig = Field(default_factory=OutboxConfig)
    spool: SpoolConfig = Field(default_factory=SpoolConfig)
    retention: RetentionConfig | None = Field(None, description="Unset: nothing is retained.")
    quarantine: QuarantineConfig = Field(default_factory=QuarantineConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    s3: S3Config | None = Field(None, description="Unset: boto3 defaults and CDML_EDGE_S3_*.")

    _resolve = field_validator("state_dir")(_resolve_path)

    @model_validator(mode="after")
    def _place_state(self, info: ValidationInfo) -> AppConfig:
        """``state_dir`` (set, or its default) and the state folders left unset under it."""
        ctx = info.context or {}
        state = self.state_dir or default_state_dir(
            ctx.get("base_dir"), ctx.get("config_name"), ctx.get("state_directory")
        )
        self.state_dir = state
        for name in STATE_FOLDERS:
            section = getattr(self, name)
            if section is not None and "dir" not in section.model_fields_set:
                section.dir = state / name
        return self

    @model_validator(mode="after")
    def _check_sources(self) -> AppConfig:
        seen: set[str] = set()
        for source in self.sources:
            if source.name in seen:
                raise ValueError(f"sources: the name {source.name!r} is used twice")
            seen.add(source.name)
        return self

    @model_validator(mode="after")
    def _check_folders(self) -> AppConfig:
        """No folder is watched twice or fed back into itself (see :func:`folder_clash`)."""
        problem = folder_clash(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_models(self) -> AppConfig:
        """Every model has a modality, and every model a source names exists and fits it."""
        for key, mc in self.models.items():
            if not re.fullmatch(_TOPIC_SAFE, key):
                raise ValueError(f"models: the name {key!r} must match {_TOPIC_SAFE}")
            if mc.modality is None:
                if key not in MODALITIES:
                    close = difflib.get_close_matches(key, MODALITIES, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise ValueError(
                        f"models.{key}.modality: is required: the name {key!r} is not a "
                        f"modality ({' | '.join(MODALITIES)}){hint}"
                    )
                mc.modality = key  # type: ignore[assignment]
        for i, source in enumerate(self.sources):
            for name in source.models or []:
                used = self.models.get(name)
                if used is None:
                    raise ValueError(
                        f"sources[{i}].models: {name!r} is not a model name "
                        f"(models: {', '.join(self.models) or 'none'})"
                    )
                if not model_fits(str(used.modality), source.modality):
                    raise ValueError(
                        f"sources[{i}].models: {name!r} is a {used.modality} "
                        f"model; the source gives {source.modality}"
                    )
        return self

    def results_mode(self) -> ResultsMode:
        """``mqtt.results`` (``item`` without MQTT): how a window's item results go out."""
        return self.mqtt.results if self.mqtt is not None else "item"

    def models_of(self, source: SourceConfig) -> list[str]:
        """The names of the models that score ``source``, the first giving its label."""
        if source.models is not None:
            return list(source.models)
        return [k for k, mc in self.models.items() if mc.modality == source.modality]


def _folder(path: Path) -> str:
    """``path`` as written, made absolute and normal (``./in/`` is ``in``); no I/O."""
    return os.path.normpath(os.path.abspath(path))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def folder_clash(cfg: AppConfig) -> str | None:
    """The first folder that would make the agent take a file twice or forever, or ``None``.

    Two folder sources on one folder (each file scored by both, and ``on_done`` of one pulls
    it from under the other); ``move_to`` the source's own folder (each moved file is taken
    again, forever); a source folder that is the state folder, or is (inside) the
    quarantine, spool or retention folder (the agent's own files would come back in).
    Compared as written, after ``..`` and ``.``: a link to the same folder is not seen.
    """
    watched: dict[str, int] = {}
    state = {name: getattr(cfg, name) for name in STATE_FOLDERS}
    for i, sc in enumerate(cfg.sources):
        if sc.kind != "folder" or sc.path is None:
            continue
        path = _folder(sc.path)
        if path in watched:
            j = watched[path]
            return (
                f"sources[{i}].path: {sc.path} is also the folder of sources[{j}] "
                f"({cfg.sources[j].name!r}): each file would be taken by both "
                "(one source per folder; 'patterns' can take several kinds of file)"
            )
        watched[path] = i
        if sc.move_to is not None and _folder(sc.move_to) == path:
            return (
                f"sources[{i}].move_to: {sc.move_to} is the source's own folder: each file "
                "moved there would be taken again, forever"
            )
        if cfg.state_dir is not None and path == _folder(cfg.state_dir):
            return f"sources[{i}].path: {sc.path} is the state folder (state_dir)"
        for name, section in state.items():
            if section is not None and _within(path, _folder(section.dir)):
                return (
                    f"sources[{i}].path: {sc.path} is inside the {name} folder "
                    f"({name}.dir: {section.dir}): the agent's own files would be taken"
                )
    return None


def is_model_class(obj: object) -> bool:
    """Whether ``obj`` is a pydantic model class.

    On Python 3.10 ``list[X]`` passes as a type, and ``issubclass`` then raises.
    """
    return isinstance(obj, type) and get_origin(obj) is None and issubclass(obj, BaseModel)
