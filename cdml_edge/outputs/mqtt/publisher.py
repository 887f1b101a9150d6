"""MQTT publisher: paho-mqtt 2.x behind the :class:`~cdml_edge.outputs.base.Output` contract.

One I/O thread owns the paho client (:mod:`~.client`), so ``publish()`` and PUBACKs never
race. ``publish_batch`` never talks to the network: messages go to the :class:`~.outbox.Outbox`
while the broker is connected and the outbox has room, otherwise to the disk
:class:`~.spool.Spool`; what fits in neither raises :class:`OutputUnavailable`. After a
reconnect the spool drains oldest first on at most every other in-flight slot, so live
results are never starved; what was in flight on a lost connection is spooled again
(at-least-once). A message an MQTT 5 broker refuses (a PUBACK with a failure code) is kept
in the spool and sent again after a pause (:mod:`~.refusals`); one larger than the Maximum
Packet Size its CONNACK announced is not sent at all (``too_large``). ``stop(timeout)`` delivers
what it can in the time and leaves the rest in the spool. The retained ``status`` topic is
``online`` after every CONNACK, ``offline`` as the Last Will and on a clean stop; with a
:class:`~.session.Session` (Sparkplug B) the session's Last Will, births and death take
its place.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode

from cdml_edge import __version__
from cdml_edge.backoff import Backoff
from cdml_edge.config import MqttConfig, OutboxConfig, SpoolConfig
from cdml_edge.errors import CdmlError
from cdml_edge.fsio import FaultHook
from cdml_edge.outputs.mqtt.batched_socket import BatchedSocket, gathered
from cdml_edge.outputs.mqtt.client import (
    BrokerSettings,
    Waker,
    announced_max_packet,
    connect_later,
    new_client,
    poll,
    publish_packet_size,
)
from cdml_edge.outputs.mqtt.embedded_broker import EmbeddedBroker
from cdml_edge.outputs.mqtt.outbox import Entry, Outbox, PublishBatch
from cdml_edge.outputs.mqtt.refusals import Held, Refusals
from cdml_edge.outputs.mqtt.session import Session
from cdml_edge.outputs.mqtt.size_limit import LOSSES_TO_LEARN, PacketLimit, Suspect
from cdml_edge.outputs.mqtt.spool import Spool, SpoolToken
from cdml_edge.outputs.mqtt.spool_format import Position, SpoolRecord, record_size
from cdml_edge.supervisor import Spawn, Worker, plain_thread
from cdml_edge.window.payloads import StatusPayload
from cdml_edge.window.topics import ABSOLUTE, OutMessage

log = logging.getLogger(__name__)

Spooled = tuple[SpoolToken, SpoolRecord]
"""A record read from the spool, with the token that acknowledges it."""

COMMIT_EVERY = 256
SHORT_LIFE_S = 10.0  # a connection lost this soon after its CONNACK counts as short-lived
SHORT_LIVES_TO_WARN = 3
"""The spool cursor is written after this many acknowledged records, or ``commit_interval``
seconds, whichever comes first: what a kill -9 in the middle of a drain sends again."""


class PublisherClosed(CdmlError, RuntimeError):
    """``publish_batch`` after ``stop``."""


class OutputUnavailable(CdmlError):
    """Messages neither the spool (a full or failing disk) nor the outbox could take.

    Names the spool folder. Their batch never becomes durable: the caller keeps the sources.
    ``refused``: the messages of the batch that were not taken (the others still go out).
    """

    def __init__(self, message: str, refused: Sequence[OutMessage] = ()) -> None:
        super().__init__(message)
        self.refused = tuple(refused)


class MqttPublisher:
    """Publish results over MQTT; see the module docstring for the delivery guarantees."""

    def __init__(
        self,
        config: MqttConfig,
        device_id: str,
        spool: SpoolConfig | None = None,
        outbox: OutboxConfig | None = None,
        *,
        version: str = __version__,
        max_inflight: int = 64,
        backoff_min: float = 0.5,
        backoff_max: float = 30.0,
        connect_timeout: float = 5.0,
        commit_interval: float = 0.2,
        commit_every: int = COMMIT_EVERY,
        on_event: FaultHook | None = None,
        announce_status: bool = True,
        spawn: Spawn = plain_thread,
        session: Session | None = None,
        refused_retry_min: float = 5.0,
        refused_retry_max: float = 300.0,
    ) -> None:
        self.config = config
        self.session = session
        self.device_id = device_id
        self.version = version
        self.max_inflight = max_inflight
        self.connect_timeout = connect_timeout
        self.commit_interval = commit_interval
        self.commit_every = commit_every
        self.announce_status = announce_status  # the retained status and the Last Will
        self.settings = BrokerSettings.from_config(config, device_id)
        self.protocol = self.settings.protocol
        self.client_id = self.settings.client_id
        self._base = f"{config.topic_prefix}/{device_id}"
        spool_cfg = spool or SpoolConfig()
        self.spool = Spool(
            Path(spool_cfg.dir),
            spool_cfg.max_bytes,
            spool_cfg.policy,
            spool_cfg.fsync,
            on_event=on_event,
        )
        self._block = spool_cfg.policy == "block"
        self.outbox = Outbox((outbox or OutboxConfig()).max_bytes)
        self._backoff = Backoff(backoff_min, backoff_max, jitter="equal")
        self.broker: EmbeddedBroker | None = None
        self.started_at = time.time()
        self._client: mqtt.Client | None = None
        self._spawn = spawn  # the I/O thread: supervised by the agent (restarted if it dies)
        self._thread: Worker | None = None
        self._waker = Waker()
        self.refusals = Refusals(refused_retry_min, refused_retry_max)
        self._held: Held[Entry | Spooled] = Held(max(64 * 1024, self.outbox.max_bytes // 8))
        self._init_io_state()

    def _init_io_state(self) -> None:
        """What the I/O thread keeps between loop turns (it alone touches most of it)."""
        self._connected = False
        self._lost = False
        self._just_connected = False
        self._closing = False
        self._closed = False
        self._close_deadline = 0.0
        self._pending: dict[int, Entry | Spooled] = {}
        self._acks: deque[tuple[int, str | None]] = deque()  # (mid, the refusal's reason)
        self._spool_buf: deque[Spooled] = deque()
        self._spool_turn = False
        self._status_mid: int | None = None
        self._status_acked = threading.Event()
        self._counts = {
            "published": 0,
            "acked": 0,
            "spooled": 0,
            "drained": 0,
            "rejected": 0,
            "reconnects": 0,
            "connect_failures": 0,
            "too_large": 0,
            "refused": 0,
            "superseded": 0,
        }
        self._next_attempt = 0.0  # monotonic time of the next connection attempt
        self._connect_started = 0.0  # monotonic time the pending CONNECT went out
        self._last_commit = 0.0  # monotonic time the spool cursor was last committed
        self._drained_at_commit = 0  # counts["drained"] at that commit
        self._warned = False  # "broker unreachable" logged once per outage
        self._refused = False  # a CONNACK refused the attempt (its reason is logged)
        self._closed_by: str | None = None  # the broker's DISCONNECT reason, while connected
        self._connected_at = 0.0
        self._short_lives = 0  # connections in a row lost soon after their CONNACK
        self._attempted = False  # a connection attempt was made since start()
        self._limit = PacketLimit()
        # a retained topic sent live -> the spool's head then: what was spooled before is older
        self._retained_live: dict[
            str, Position
        ] = {}  # the CONNACK's Maximum Packet Size, or one learned

    # ------------------------------------------------------------------ Output API
    @property
    def connected(self) -> bool:
        """Whether the broker accepted the connection (CONNACK) and it is up now."""
        return self._connected

    @property
    def io_stopped(self) -> bool:
        """The I/O thread was started and is gone although :meth:`stop` was not called."""
        return self._thread is not None and not self._thread.is_alive() and not self._closing

    @property
    def broker_url(self) -> str:
        """The broker's URL: the embedded broker's, or ``mqtt.url``'s."""
        return self.broker.url if self.broker is not None else self.settings.url()

    def topic(self, relative: str) -> str:
        """Full topic of a message topic: relative to ``{prefix}/{device}``, or absolute."""
        if relative[:1] == ABSOLUTE:
            return relative[1:]
        return f"{self._base}/{relative}"

    def start(self) -> None:
        """Start the I/O thread; returns at once, broker or not."""
        if self._thread is not None:
            return
        if self.settings.embedded:
            self.broker = EmbeddedBroker().start()
        self.started_at = time.time()
        self._client = self._make_client()
        self._thread = self._spawn("mqtt-io", self._run)
        self._thread.start()

    def publish_batch(
        self,
        messages: Sequence[OutMessage],
        on_durable: Callable[[], None] | None = None,
        on_given_up: Callable[[], None] | None = None,
        *,
        on_sent: Callable[[OutMessage], None] | None = None,
    ) -> None:
        """Queue messages; ``on_durable`` fires once each is PUBACKed or spooled.

        ``on_given_up`` instead once the batch is settled, when a message of it can never be
        delivered (larger than the spool or than the broker's Maximum Packet Size).
        ``on_sent`` gets each message once it is PUBACKed or spooled, never one given up.
        """
        if self._closing or self._closed:
            raise PublisherClosed("publish_batch after stop()")
        batch = PublishBatch(len(messages), on_durable, on_given_up)
        entries = [Entry(m, batch, on_sent=on_sent) for m in messages]
        overflow: list[Entry] = []
        if self._connected:
            for entry in entries:
                if overflow or not self.outbox.try_put(entry):
                    overflow.append(entry)
        else:
            overflow = entries
        if overflow:
            left = self._spool_entries(overflow, wait=self._block)
            if left:
                self._hold(left)
            self._waker.wake()
        else:
            self._waker.nudge()  # an awake I/O thread pumps the outbox before it sleeps

    def _hold(self, entries: list[Entry]) -> None:
        """Keep entries the spool could not take (a full or failing disk) in the outbox.

        They are kept connected or not (the I/O thread spools them once it can); what does
        not fit there either is refused, and so is its batch (:class:`OutputUnavailable`):
        its callbacks never fire, the caller takes it again (what of it was kept still goes
        out: at least once).
        """
        kept = 0
        for entry in entries:
            if not self.outbox.try_put(entry):
                break
            kept += 1
        refused = entries[kept:]
        if not refused:
            return
        for entry in refused:
            entry.refuse()
        self._counts["refused"] += len(refused)
        self._waker.wake()
        raise OutputUnavailable(
            f"{self.spool.dir}: {len(refused)} messages refused: the spool cannot take them "
            f"({self.spool.faults.degraded or 'full'}) and the outbox is full",
            [e.message for e in refused],
        )

    def stats(self) -> dict[str, int]:
        """The publisher's counters, the spool's, and the queues and connection now."""
        out = dict(self._counts)
        out.update(self.spool.stats())
        out.update(
            {
                "outbox_depth": len(self.outbox),
                "outbox_bytes": self.outbox.bytes,
                "inflight": len(self._pending),
                "refused_held": len(self._held),
                "dropped": self.spool.dropped,
                "bytes_written": self.spool.bytes_written,
                "broker_connected": int(self._connected),
                "io_thread_alive": int(self._thread is not None and self._thread.is_alive()),
            }
        )
        return out

    def counted(self, key: str) -> int:
        """The counter ``key`` of :meth:`stats` that :meth:`add_count` keeps (0 if none)."""
        return self._counts.get(key, 0)

    def add_count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``key`` of :meth:`stats` (made at 0 if new)."""
        self._counts[key] = self._counts.get(key, 0) + n

    def stop(self, timeout: float = 5.0) -> None:
        """Deliver what is queued within ``timeout``, spool the rest, publish ``offline``."""
        if self._closed:
            return
        self._close_deadline = time.monotonic() + timeout
        self._closing = True
        self._waker.wake()
        if self._thread is not None:
            self._thread.join(timeout + self.connect_timeout + 1.0)
        self._spool_leftovers()
        self.spool.close()
        self._closed = True
        self._waker.close()
        if self.broker is not None:
            self.broker.stop()

    # ------------------------------------------------------------------ spooling
    def _spool_entries(self, entries: list[Entry], wait: bool) -> list[Entry]:
        """Write entries to the spool and complete them; returns those that did not fit."""
        fits: list[Entry] = []
        for entry in entries:
            blob = record_size(entry.message.topic, entry.message.payload)
            if blob > self.spool.max_bytes:
                # Never spoolable: its batch is left incomplete so on_durable does not fire
                # and the caller keeps the source for a retry; counted as ``too_large``.
                log.error(
                    "%s: %d-byte message is larger than spool.max_bytes=%d; not "
                    "delivered, its batch stays incomplete",
                    entry.message.topic,
                    blob,
                    self.spool.max_bytes,
                )
                self._counts["too_large"] += 1
                entry.abandon()
            else:
                fits.append(entry)
        records = [self._record(e.message) for e in fits]
        written = self.spool.append(records, wait=wait) if records else 0
        for entry in fits[:written]:
            entry.complete()
        self._counts["spooled"] += written
        return fits[written:]

    def _spool_leftovers(self) -> None:
        live = [e for e in self._pending.values() if isinstance(e, Entry) and not e.done]
        live += [e for e in self._held.take_all() if isinstance(e, Entry) and not e.done]
        self._pending.clear()
        left = [e for e in live + self.outbox.take_all() if not e.done]
        if left:
            with contextlib.suppress(Exception):
                rest = self._spool_entries(left, wait=False)
                if rest:
                    log.error("spool full at stop: %d messages not delivered", len(rest))

    def _record(self, message: OutMessage) -> SpoolRecord:
        """The spool record of ``message``: its topic, payload, QoS and retain flag."""
        return SpoolRecord(message.topic, message.payload, self._qos(message), message.retain)

    def _qos(self, message: OutMessage) -> int:
        return self.config.qos if message.qos is None else message.qos

    # ------------------------------------------------------------------ client setup
    def _make_client(self) -> mqtt.Client:
        client = new_client(
            self.settings,
            max_inflight=self.max_inflight + 2,
            connect_timeout=self.connect_timeout,
            will=(self.topic("status"), self._status("offline")) if self._json_status else None,
            clean=self._clean_session,
        )
        if self.session is not None:
            client.on_message = self._on_message
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        if self.broker is not None:
            host, port = self.broker.host, self.broker.port
        else:
            assert self.settings.address is not None
            host, port = self.settings.address.host, self.settings.address.port
        connect_later(client, self.settings, host, port, clean=self._clean_session)
        return client

    @property
    def _clean_session(self) -> bool:
        """No session kept by the broker: the session asks for it (Sparkplug B)."""
        return self.session is not None and self.session.clean_session

    @property
    def _json_status(self) -> bool:
        return self.announce_status and self.session is None

    def _status(self, state: str) -> bytes:
        payload = StatusPayload(
            state=state,  # type: ignore[arg-type]
            version=self.version,
            started_at=self.started_at,
            device=self.device_id,
        )
        return payload.model_dump_json().encode()

    # ------------------------------------------------------------------ paho callbacks
    # They run inside paho calls made by the I/O thread; they only record what happened.
    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if rc.is_failure:
            log.error("broker %s refused the connection: %s", self.broker_url, rc)
            self._counts["connect_failures"] += 1
            self._refused = True
            return
        self._limit.announced = announced_max_packet(props)
        self._connected = True
        self._just_connected = True

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        refused, self._refused = self._refused, False
        closed = getattr(rc, "is_failure", False)  # by the broker, not by a disconnect() here
        if closed and not self._connected and not refused:  # before any CONNACK, no reason
            self._counts["connect_failures"] += 1
            log.log(
                logging.DEBUG if self._warned else logging.WARNING,
                "broker %s closed the connection before accepting it (%s): it refuses the "
                "client id, credentials or a topic (the Last Will's); retrying",
                self.broker_url,
                rc,
            )
            self._warned = True
        if self._connected and getattr(flags, "is_disconnect_packet_from_server", False):
            self._closed_by = _reason(rc) if closed else None
        self._lost = True

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        refused = bool(getattr(rc, "is_failure", False))
        self._acks.append((mid, _reason(rc) if refused else None))

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        if self.session is not None:
            self.session.on_command(msg.topic, bytes(msg.payload))

    # ------------------------------------------------------------------ I/O thread
    def _run(self) -> None:
        client = self._client
        assert client is not None
        self._last_commit = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if self._closing and self._finish_close(client):
                    return
                if client.socket() is None:
                    if not self._reconnect(client, now):
                        return
                else:
                    self._serve(client, now)
        except Exception:
            log.exception("MQTT I/O thread failed")
            self._connected = False
            raise  # a supervisor restarts the loop

    def _reconnect(self, client: mqtt.Client, now: float) -> bool:
        """No socket: take back what was in flight, spool the outbox, connect when allowed.

        A connection is attempted once the backoff allows. ``False`` when stopping.
        """
        if self._connected or self._lost:
            self._handle_lost(client)
            self._next_attempt = now + self._backoff.next()
        if self._closing and self._attempted:
            return False
        self._flush_outbox_to_spool()
        if now < self._next_attempt and not self._closing:
            self._waker.wait(self._next_attempt - now)
            return True
        self._attempted = True
        if self.session is not None:  # a new Last Will for every CONNECT
            will_topic, will = self.session.connecting()
            client.will_set(will_topic, will, qos=1, retain=False)
        try:
            client.reconnect()
            self._connect_started = time.monotonic()
        except (OSError, ValueError) as exc:
            self._counts["connect_failures"] += 1
            delay = self._backoff.next()
            self._next_attempt = time.monotonic() + delay
            level = logging.DEBUG if self._warned else logging.WARNING
            log.log(
                level,
                "broker %s unreachable (%s); retry in %.1fs, spooling to %s",
                self.broker_url,
                exc,
                delay,
                self.spool.dir,
            )
            self._warned = True
        return True

    def _serve(self, client: mqtt.Client, now: float) -> None:
        """A socket: read and write it, publish more and commit the spool cursor.

        Also gives up on a missing CONNACK, announces ``online`` and completes acknowledged
        messages.
        """
        poll(client, self._waker, self._outbox_waiting)
        if self._lost and client.socket() is None:
            return
        if not self._connected and now - self._connect_started > self.connect_timeout:
            log.warning("broker %s: no CONNACK within %.1fs", self.broker_url, self.connect_timeout)
            client.disconnect()
            with contextlib.suppress(Exception):
                client.loop_write()
            self._next_attempt = time.monotonic() + self._backoff.next()
            return
        if self._just_connected:
            self._announce_online(client)
        elif self.session is not None and self._connected and self.session.rebirth_due():
            self._births(client, self.session)
        self._process_acks()
        if self._connected and not _held_back(client):
            with gathered(client.socket()):  # the turn's messages leave in one send
                self._pump(client)
        self._maybe_commit()

    def _outbox_waiting(self) -> bool:
        """Messages wait in the outbox and may be sent now.

        Connected, the window not full, and no bytes of the last turn waiting for the socket.
        """
        client = self._client
        return (
            self._connected
            and len(self.outbox) > 0
            and len(self._pending) < self.max_inflight
            and (client is None or not _held_back(client))
        )

    def _maybe_commit(self) -> None:
        """Persist the spool cursor when due.

        It is due every ``commit_every`` acknowledged records or ``commit_interval`` seconds.
        """
        due = self._counts["drained"] - self._drained_at_commit >= self.commit_every
        if due or time.monotonic() - self._last_commit >= self.commit_interval:
            self.spool.commit()
            self._last_commit = time.monotonic()
            self._drained_at_commit = self._counts["drained"]

    def _announce_online(self, client: mqtt.Client) -> None:
        self._just_connected = False
        self._warned = False
        self._backoff.reset()
        self._connected_at = time.monotonic()
        self._counts["reconnects"] += 1
        log.info("connected to %s as %s (MQTT %s)", self.broker_url, self.client_id, self.protocol)
        if self.session is not None:
            client.subscribe(self.session.command_topic, qos=1)
            self._births(client, self.session)
        elif self.announce_status:
            info = client.publish(self.topic("status"), self._status("online"), 1, True)
            self._status_mid = info.mid

    def _births(self, client: mqtt.Client, session: Session) -> None:
        """The session's births, before anything else of this connection (QoS 0)."""
        for topic, payload in session.births():
            client.publish(topic, payload, 0, False)

    def _process_acks(self) -> None:
        while self._acks:
            mid, refusal = self._acks.popleft()
            if mid == self._status_mid:
                self._status_mid = None
                self._status_acked.set()
                continue
            item = self._pending.pop(mid, None)
            if item is None:
                continue
            if refusal is not None:
                self._keep_refused(item, refusal)
                continue
            self._counts["acked"] += 1
            self._limit.acked(len(_payload_of(item)))
            if self.refusals.topics:
                self.refusals.accepted(self.topic(_topic_of(item)))
            if isinstance(item, Entry):
                item.complete()
            else:
                self.spool.ack(item[0])
                self._counts["drained"] += 1

    def _keep_refused(self, item: Entry | Spooled, reason: str) -> None:
        """A message the broker refused is kept, to be sent again after the pause.

        In the spool when it takes it: a live message then counts toward its batch (its
        window's files are finished) and a spooled one's old copy is let go. Else in memory
        (:class:`Held`, bounded): a live message's batch waits, a spooled one stays
        unacknowledged. When memory is full too, a live message's batch never fires (its
        files stay where they are) and a spooled one is read again after a reconnect.
        """
        self._counts["rejected"] += 1
        record = self._record(item.message) if isinstance(item, Entry) else item[1]
        size = record_size(record.topic, record.payload)
        if size <= self.spool.max_bytes and self.spool.append([record], wait=False) == 1:
            where = f"kept in the spool {self.spool.dir}"
            if isinstance(item, Entry):
                self._counts["spooled"] += 1
                item.complete()
            else:
                self.spool.ack(item[0])
        elif self._held.add(item, size):
            where = "held in memory (the spool cannot take it)"
        elif isinstance(item, Entry):
            item.abandon()
            where = "not kept (spool and memory full): its window's files stay where they are"
        else:
            where = "left in the spool, to be sent again after a reconnect"
        self.refusals.refused(self.topic(record.topic), reason, where)

    def _pump(self, client: mqtt.Client) -> None:
        """One turn: publish from the outbox and the spool while the window has room.

        On a :class:`BatchedSocket` the turn's first message says whether it is gathered
        (QoS 1 and 2: sent in one call at the end) or sent as it goes (QoS 0, which paho
        counts delivered once sent); a message of the other kind waits for the next turn.
        """
        sock = client.socket()
        batched = sock if isinstance(sock, BatchedSocket) else None
        gathering: bool | None = None
        while len(self._pending) < self.max_inflight:
            entry, spooled = self._take_next()
            if entry is None and spooled is None:
                return
            if entry is not None:
                msg = entry.message
                topic, payload, qos, retain = msg.topic, msg.payload, self._qos(msg), msg.retain
                item: Entry | Spooled = entry
            else:
                assert spooled is not None
                rec = spooled[1]
                topic, payload, qos, retain = rec.topic, rec.payload, rec.qos, rec.retain
                item = spooled
            if batched is not None and gathering is not None and (qos > 0) != gathering:
                self._put_back(entry, spooled)
                return
            if batched is not None and gathering is None:
                gathering = batched.gathering = qos > 0
            topic = self.topic(topic)
            if self.session is not None and topic.startswith(self.session.namespace):
                if self.session.rebirth_due():  # a device new since this turn began
                    self._births(client, self.session)
                payload = self.session.stamp(payload, entry is None)  # in the order sent
            if self._oversize(topic, payload, qos):
                if self.session is not None and topic.startswith(self.session.namespace):
                    self.session.unstamp()
                self._drop_oversize(item, topic, len(payload))
                continue
            if retain and self._superseded(topic, spooled):
                continue
            info = client.publish(topic, payload, qos, retain)
            if info.rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:  # no free message id: retry later
                if self.session is not None and topic.startswith(self.session.namespace):
                    self.session.unstamp()
                self._put_back(entry, spooled)
                return
            self._counts["published"] += 1
            self._pending[info.mid] = item
            if client.socket() is None:
                return  # the write failed: _handle_lost will spool / rewind

    def _superseded(self, topic: str, spooled: Spooled | None) -> bool:
        """A retained message: remember a live one; let go a spooled one older than it.

        The spool drains between live messages: sent, a spooled retained message older than
        one sent live would become the broker's retained state (a camera streaming again
        shown as down). Such a one is let go, counted in ``superseded``.
        """
        if spooled is None:
            self._retained_live[topic] = self.spool.head()
            return False
        newer = self._retained_live.get(topic)
        if newer is None or spooled[0].end > newer:
            return False
        self.spool.ack(spooled[0])
        self._counts["superseded"] += 1
        return True

    def _oversize(self, topic: str, payload: bytes, qos: int) -> bool:
        """The PUBLISH is larger than the broker takes (its CONNACK's or a learned limit)."""
        limit = self._limit
        if limit.announced is None and limit.learned is None:
            return False
        size = publish_packet_size(topic, len(payload), qos, self.protocol == "5")
        return limit.too_large(size, len(payload))

    def _drop_oversize(self, item: Entry | Spooled, topic: str, payload_len: int) -> None:
        """Give up on a message the broker would not take (announced or learned limit).

        Sent, it would make the broker close the connection, and again after every
        reconnect. Counted as ``too_large``: a live message's batch never fires (its
        window's files stay where they are); a spooled one is let go and counted in
        ``dropped``.
        """
        self._counts["too_large"] += 1
        if isinstance(item, Entry):
            item.abandon()
            fate = "its batch stays incomplete"
        else:
            self.spool.discard(item[0])
            fate = "dropped from the spool"
        log.error(
            "%s: %d-byte message is larger than %s; not sent, %s",
            topic,
            payload_len,
            self._limit.describe(),
            fate,
        )

    def _take_next(self) -> tuple[Entry | None, Spooled | None]:
        """The next message to send, or none.

        A held refused one once its retry is due; else from the spool and the outbox in
        turn, whichever has one.
        """
        if len(self._held) and self.refusals.may_retry():
            held = self._held.pop()
            return (held, None) if isinstance(held, Entry) else (None, held)
        entry: Entry | None = None
        spooled: Spooled | None = None
        if self._spool_turn:
            spooled = self._next_spooled()
        if spooled is None:
            entry = self.outbox.pop()
        if entry is None and spooled is None:
            spooled = self._next_spooled()
        if entry is not None or spooled is not None:
            self._spool_turn = not self._spool_turn
        return entry, spooled

    def _put_back(self, entry: Entry | None, spooled: Spooled | None) -> None:
        """A message taken but not published goes first next time."""
        if entry is not None:
            self.outbox.put_front([entry])
        elif spooled is not None:
            self._spool_buf.appendleft(spooled)

    def _next_spooled(self) -> Spooled | None:
        """The next spooled record to send; one on a refused topic is held till its retry.

        ``None`` when none is left, or when memory cannot hold one more waiting record (the
        drain then waits for the retry).
        """
        while True:
            if not self._spool_buf:
                self._spool_buf.extend(self.spool.read(64))
            if not self._spool_buf:
                return None
            rec = self._spool_buf[0][1]
            if not self.refusals.topics or not self.refusals.waits(self.topic(rec.topic)):
                return self._spool_buf.popleft()
            if not self._held.add(self._spool_buf[0], record_size(rec.topic, rec.payload)):
                return None
            self._spool_buf.popleft()

    def _handle_lost(self, client: mqtt.Client) -> None:
        """Connection gone: take back everything in flight (we redeliver it ourselves)."""
        was_connected = self._connected
        self._connected = False
        self._lost = False
        self._just_connected = False
        client.drop_out_messages()
        self._process_acks()
        learned = was_connected and self._learn_limit()
        live = [e for e in self._pending.values() if isinstance(e, Entry) and not e.done]
        live += [e for e in self._held.take_all() if isinstance(e, Entry) and not e.done]
        self._pending.clear()
        self._acks.clear()
        self._status_mid = None
        self._spool_buf.clear()
        self.spool.rewind()
        left = self._spool_entries(live + self.outbox.take_all(), wait=False)
        if left:
            self.outbox.put_front(left)
        closed_by, self._closed_by = self._closed_by, None
        if was_connected:
            log.warning(
                "lost the connection to %s%s; spooling to %s",
                self.broker_url,
                _why_closed(closed_by, self.client_id),
                self.spool.dir,
            )
            if learned:  # not another client with this id: the streak was the message's
                self._short_lives = 0
            else:
                self._note_short_life()

    def _learn_limit(self) -> bool:
        """A lost connection: maybe the broker closes on the oldest message in flight.

        See :class:`PacketLimit`; said once, at error, when the limit is learned (``True``).
        """
        oldest = next(iter(self._pending.values()), None)
        suspect = None
        if oldest is not None:
            suspect = Suspect(self.topic(_topic_of(oldest)), _payload_of(oldest))
        if self._limit.lost(suspect, time.monotonic() - self._connected_at):
            assert suspect is not None
            log.error(
                "the broker %s closed the connection %d times in a row while the %d-byte "
                "message on %s was the oldest in flight, larger than any it acknowledged "
                "in this run (%d bytes at most): it takes it as too large, under a limit "
                "it does not announce (MQTT 3.1.1, or Mosquitto's max_packet_size / "
                "message_size_limit); "
                "payloads of %d bytes or more are not sent from now on (counted in "
                "too_large)",
                self.broker_url,
                LOSSES_TO_LEARN,
                len(suspect.payload),
                suspect.topic,
                self._limit.largest_acked,
                len(suspect.payload),
            )
            return True
        return False

    def _note_short_life(self) -> None:
        """Say once per streak when connections keep dying soon after the broker accepted them.

        The mark of a second client with the same client id: brokers that close the old
        session without a DISCONNECT reason (Mosquitto 2.0) give no other sign.
        """
        short = time.monotonic() - self._connected_at < SHORT_LIFE_S
        self._short_lives = self._short_lives + 1 if short else 0
        if self._short_lives == SHORT_LIVES_TO_WARN:
            log.warning(
                "the broker %s closed the connection %d times in a row within %.0f s of "
                "accepting it: is another client connected with the client id %r (two agents "
                "with the same device.id or mqtt.client_id)?",
                self.broker_url,
                SHORT_LIVES_TO_WARN,
                SHORT_LIFE_S,
                self.client_id,
            )

    def _flush_outbox_to_spool(self) -> None:
        if len(self.outbox):
            left = self._spool_entries(self.outbox.take_all(), wait=False)
            if left:
                self.outbox.put_front(left)

    def _finish_close(self, client: mqtt.Client) -> bool:
        """While stopping: deliver the outbox and the spool, then go ``offline``.

        Delivers until both are empty or time is up (waiting for a connection being set up,
        or making one attempt when none was made yet). ``False`` while there is more to do.
        """
        time_left = self._close_deadline - time.monotonic()
        if time_left > 0 and self._undelivered():
            if self._connected or client.socket() is not None:
                return False  # serving, or waiting for the CONNACK (bounded by connect_timeout)
            if not self._attempted:
                return False  # the first connection attempt has not been made yet
        if self._connected and client.socket() is not None:
            if self.announce_status or self.session is not None:
                self._go_offline(client, time_left)
            client.disconnect()
            with contextlib.suppress(Exception):
                client.loop_write()
        self._process_acks()
        self._connected = False
        return True

    def _go_offline(self, client: mqtt.Client, time_left: float) -> None:
        """Publish the retained ``offline`` (the session's death) and wait for its PUBACK."""
        self._status_acked.clear()
        if self.session is not None:
            topic, death = self.session.death()
            info = client.publish(topic, death, 1, False)
        else:
            info = client.publish(self.topic("status"), self._status("offline"), 1, True)
        self._status_mid = info.mid
        end = time.monotonic() + max(0.2, min(1.0, time_left))
        while not self._status_acked.is_set() and time.monotonic() < end:
            poll(client, self._waker)
            if client.socket() is None:
                break
            self._process_acks()

    def _undelivered(self) -> bool:
        """Messages not yet acknowledged: outbox, in flight, or in the spool.

        Not the spool nor what is held while refused topics wait for their retry: those wait
        for the next start.
        """
        if self.refusals.topics and not self.refusals.may_retry():
            return bool(len(self.outbox) or self._pending)
        spooled = self._spool_buf or self.spool.pending or len(self._held)
        return bool(len(self.outbox) or self._pending or spooled)


def _topic_of(item: Entry | Spooled) -> str:
    return item.message.topic if isinstance(item, Entry) else item[1].topic


def _payload_of(item: Entry | Spooled) -> bytes:
    return item.message.payload if isinstance(item, Entry) else item[1].payload


def _reason(rc: Any) -> str:
    """The broker's reason for a refusal, as its name (``Not authorized``) when it has one."""
    try:
        return str(rc.getName())
    except (KeyError, ValueError):  # a code paho has no single name for
        return f"reason code {getattr(rc, 'value', rc)}"


def _why_closed(reason: str | None, client_id: str) -> str:
    """What the broker's DISCONNECT said, for the log line of a lost connection."""
    if reason is None:
        return ""
    if reason == "Session taken over":
        return (
            f": the broker says 'Session taken over', another client connected with the client"
            f" id {client_id!r} (two agents with the same device.id or mqtt.client_id?)"
        )
    return f": the broker closed it ({reason})"


def _held_back(client: mqtt.Client) -> bool:
    """Bytes of the last turn wait for the socket, here or in paho: no new turn till sent.

    A packet paho could not send (a QoS 0 message sent as it went) would otherwise leave
    in the next turn's gathered bytes, and paho count it sent before the kernel has it.
    """
    sock = client.socket()
    return isinstance(sock, BatchedSocket) and (sock.unsent() or client.want_write())
