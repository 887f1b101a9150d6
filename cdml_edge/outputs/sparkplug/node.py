"""The Sparkplug B edge node: topics, birth and death certificates, ``bdSeq`` and ``seq``.

Formatting (pipeline threads) turns our JSON messages into NDATA / DDATA payloads without a
``seq``; each metric's last value is remembered for the next births once the publisher sent
the message (PUBACKed, or spooled to be sent): neither a message it refuses nor one it gives
up on (larger than the spool or the broker's packet limit) shows in a birth. The publisher's I/O
thread asks it, on its own schedule: the NDEATH Last Will before every CONNECT (``bdSeq``
one up, kept in a file across restarts), the NBIRTH (``seq`` 0) and a DBIRTH per device
after every CONNACK and on an NCMD ``Node Control/Rebirth``, and the ``seq`` of each
message as it goes on the wire (:meth:`SparkplugNode.stamp`), so the numbers follow the
order the broker sees, spooled messages included.

Which device has which block of aliases is kept in a file too (``devices_file``), for the
spool's sake: a DDATA waiting there carries the aliases it was formatted with, and the next
run of the agent delivers it. So a device keeps its aliases across restarts, whatever the
order of the sources in the configuration, and a device born at run time (the ``agent``
device, a source added later) is born again by the next run while its data may wait in the
spool.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from cdml_edge.fsio import atomic_write
from cdml_edge.outputs.sparkplug.metrics import (
    BDSEQ,
    DEVICE_METRICS,
    NODE_ALIASES,
    NODE_METRICS,
    REBIRTH,
    MetricSpec,
    device_aliases,
    set_value,
)
from cdml_edge.outputs.sparkplug.proto import payload_class

log = logging.getLogger(__name__)

NAMESPACE = "spBv1.0"
SEQ_MOD = 256  # seq and bdSeq: 0..255, then 0 again


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class DataMessage(NamedTuple):
    """An NDATA or DDATA of :meth:`SparkplugNode.data`, and the metric values it sets."""

    topic: str
    payload: bytes
    source: str | None
    values: dict[str, Any]
    made: int = 0
    """Its place in the order the node made data messages: a later one's values win."""


def now_ms() -> int:
    """UTC milliseconds since the epoch, the specification's timestamps."""
    return int(time.time() * 1000)


class SparkplugNode:
    """One edge node and its devices (one per source); thread-safe.

    The publisher's :class:`~cdml_edge.outputs.mqtt.session.Session`.
    """

    namespace = NAMESPACE + "/"
    clean_session = True
    """Sparkplug B 3.0: Clean Session (MQTT 3.1.1), Clean Start and expiry 0 (MQTT 5)."""

    def __init__(
        self,
        group_id: str,
        node_id: str,
        devices: list[str],
        bdseq_file: Path | None = None,
        devices_file: Path | None = None,
        keep_known: bool = True,
    ) -> None:
        """``devices``: the configured ones, born at every birth.

        ``devices_file`` keeps each device's alias block across runs; with ``keep_known``
        the devices it names beyond ``devices`` are born too (their data may wait in the
        spool), without it they are forgotten.
        """
        self.group_id = group_id
        self.node_id = node_id
        self._payload = payload_class()
        self._lock = threading.Lock()
        self._devices: dict[str, dict[str, tuple[int, MetricSpec]]] = {}
        self._last: dict[str | None, dict[str, Any]] = {None: {}}
        self._made_of: dict[str | None, dict[str, int]] = {}  # what made each of _last
        self._made = 0  # data messages made
        self._bdseq_file = bdseq_file
        self.bdseq = self._read_bdseq()
        self.seq = 0
        self._rebirth = False
        self._devices_file = devices_file
        self._index = self._read_devices()  # device -> its alias block, kept across runs
        if not keep_known:
            self._index = {n: i for n, i in self._index.items() if n in devices}
        for name in [*devices, *(n for n in self._index if n not in devices)]:
            self._add_device(name)
        self._write_devices()

    # ------------------------------------------------------------------ topics
    def topic(self, kind: str, device: str | None = None) -> str:
        """``spBv1.0/{group}/{kind}/{node}[/{device}]``."""
        base = f"{NAMESPACE}/{self.group_id}/{kind}/{self.node_id}"
        return base if device is None else f"{base}/{device}"

    @property
    def command_topic(self) -> str:
        """Where host applications send this node's commands (NCMD)."""
        return self.topic("NCMD")

    @property
    def devices(self) -> list[str]:
        """The devices born (or to be born), in alias order."""
        with self._lock:
            return list(self._devices)

    # ------------------------------------------------------------------ formatting
    def data(self, kind: str, source: str | None, doc: dict[str, Any]) -> DataMessage | None:
        """NDATA (``source`` None) or DDATA of a JSON payload of topic ``kind``; no ``seq``.

        ``None`` for a kind without metrics. A source not seen before becomes a device and
        the node is born again before its first DDATA goes out. The births show its values
        only once :meth:`remember` is given it (once the publisher took it).
        """
        specs = (NODE_METRICS if source is None else DEVICE_METRICS).get(kind)
        if specs is None:
            return None
        ts = now_ms()
        values: dict[str, Any] = {}
        with self._lock:
            self._made += 1
            made = self._made
            if source is not None and source not in self._devices:
                self._add_device(source)
                self._rebirth = True
            aliases = NODE_ALIASES if source is None else self._devices[source]
            payload = self._payload(timestamp=ts)
            for spec in specs:
                value = values[spec.name] = spec.read(doc)
                metric = payload.metrics.add(alias=aliases[spec.name][0], timestamp=ts)
                set_value(metric, spec.datatype, value)
        kind_name = "NDATA" if source is None else "DDATA"
        return DataMessage(
            self.topic(kind_name, source), payload.SerializeToString(), source, values, made
        )

    def remember(self, data: DataMessage) -> None:
        """``data`` was published (or spooled): the next births show its values.

        A value of a message made after ``data`` and remembered before it stays.
        """
        with self._lock:
            last = self._last.setdefault(data.source, {})
            made = self._made_of.setdefault(data.source, {})
            for name, value in data.values.items():
                if made.get(name, -1) <= data.made:
                    last[name], made[name] = value, data.made

    def _add_device(self, name: str) -> None:
        """``name`` becomes a device: the alias block it had before, else the next free one."""
        index = self._index.get(name)
        if index is None:
            index = max(self._index.values(), default=-1) + 1
            self._index[name] = index
            self._write_devices()
        self._devices[name] = device_aliases(index)
        self._last[name] = {}
        self._made_of[name] = {}

    # ------------------------------------------------------------------ the I/O thread's
    def connecting(self) -> tuple[str, bytes]:
        """Before a CONNECT: ``bdSeq`` one up; the NDEATH to register as the Last Will."""
        with self._lock:
            self.bdseq = (self.bdseq + 1) % SEQ_MOD
            self._write_bdseq()
            return self.death()

    def death(self) -> tuple[str, bytes]:
        """The NDEATH of this connection: its ``bdSeq``, no ``seq``."""
        payload = self._payload(timestamp=now_ms())
        metric = payload.metrics.add(name=BDSEQ, datatype=NODE_ALIASES[BDSEQ][1].datatype)
        set_value(metric, metric.datatype, self.bdseq)
        return self.topic("NDEATH"), payload.SerializeToString()

    def births(self) -> list[tuple[str, bytes]]:
        """NBIRTH (``seq`` 0) and one DBIRTH per device, each metric with its last value."""
        ts = now_ms()
        with self._lock:
            self._rebirth = False
            self.seq = 0
            node = self._birth(ts, NODE_ALIASES, {**self._last[None], BDSEQ: self.bdseq})
            out = [(self.topic("NBIRTH"), node)]
            for name, aliases in self._devices.items():
                out.append((self.topic("DBIRTH", name), self._birth(ts, aliases, self._last[name])))
            return out

    def _birth(
        self, ts: int, aliases: dict[str, tuple[int, MetricSpec]], last: dict[str, Any]
    ) -> bytes:
        payload = self._payload(timestamp=ts, seq=self._next_seq())
        for name, (alias, spec) in aliases.items():
            metric = payload.metrics.add(
                name=name, alias=alias, datatype=spec.datatype, timestamp=ts
            )
            value = last.get(name, False if name == REBIRTH else None)
            set_value(metric, spec.datatype, value)
        return bytes(payload.SerializeToString())

    def _next_seq(self) -> int:
        seq = self.seq
        self.seq = (seq + 1) % SEQ_MOD
        return seq

    def stamp(self, payload: bytes, historical: bool = False) -> bytes:
        """``payload`` with the next ``seq`` (protobuf field 3 appended: the last one wins).

        ``historical`` (drained from the spool): each metric flagged ``is_historical``, so a
        host stores it without taking it for the current value.
        """
        if historical:
            message = self._payload.FromString(payload)
            for metric in message.metrics:
                metric.is_historical = True
            payload = message.SerializeToString()
        with self._lock:
            return payload + b"\x18" + _varint(self._next_seq())

    def unstamp(self) -> None:
        """The last stamped message did not go out: its ``seq`` is handed out again."""
        with self._lock:
            self.seq = (self.seq - 1) % SEQ_MOD

    def rebirth_due(self) -> bool:
        """A rebirth was asked for (NCMD) or a new device appeared."""
        return self._rebirth

    def on_command(self, topic: str, raw: bytes) -> None:
        """An NCMD: ``Node Control/Rebirth`` true makes :meth:`rebirth_due`."""
        if topic != self.command_topic:
            return
        from google.protobuf.message import DecodeError  # there: the payload class needs it

        payload = self._payload()
        try:
            payload.ParseFromString(raw)
        except DecodeError:  # a malformed command is logged, never fatal
            log.warning("%s: a command that is not a Sparkplug B payload", topic)
            return
        rebirth_alias = NODE_ALIASES[REBIRTH][0]
        for metric in payload.metrics:  # by name, or by the alias the NBIRTH gave it
            named = metric.name == REBIRTH or (not metric.name and metric.alias == rebirth_alias)
            if named and metric.boolean_value:
                log.info("%s: rebirth requested", topic)
                self._rebirth = True

    # ------------------------------------------------------------------ bdSeq file
    def _read_bdseq(self) -> int:
        """The ``bdSeq`` of the last CONNECT (so the next one is one up); 255 at first."""
        if self._bdseq_file is not None:
            with contextlib.suppress(OSError, ValueError):
                return int(self._bdseq_file.read_text().strip()) % SEQ_MOD
        return SEQ_MOD - 1

    def _write_bdseq(self) -> None:
        if self._bdseq_file is None:
            return
        try:
            self._bdseq_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self._bdseq_file, f"{self.bdseq}\n".encode(), fsync=False)
        except OSError as exc:
            log.warning("%s: bdSeq not kept: %s", self._bdseq_file, exc)

    # ------------------------------------------------------------------ devices file
    def _read_devices(self) -> dict[str, int]:
        """Device -> alias block of the last run (none when the file is missing or unreadable)."""
        if self._devices_file is None:
            return {}
        try:
            doc = json.loads(self._devices_file.read_text())
            known: dict[str, int] = {}
            for name, index in doc["devices"].items():
                if int(index) >= 0 and int(index) not in known.values():  # one block, one device
                    known[str(name)] = int(index)
            return known
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def _write_devices(self) -> None:
        if self._devices_file is None:
            return
        text = json.dumps({"devices": self._index}, indent=1, sort_keys=True) + "\n"
        try:
            self._devices_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self._devices_file, text.encode(), fsync=False)
        except OSError as exc:
            log.warning("%s: device aliases not kept: %s", self._devices_file, exc)
