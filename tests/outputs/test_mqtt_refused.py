"""A message the broker refuses (an MQTT 5 PUBACK with a failure code) is kept, not lost.

Against a real Mosquitto whose ACL lets the results topic be read but not written: the
refused result goes to the spool before its batch is durable (so the agent finishes its
files only then), health names the refusal, and once the ACL allows the topic the result
arrives from the spool.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from helpers.mqtt_brokers import BrokerProcess, Subscriber, mosquitto_binary, wait_until

from cdml_edge.config import MqttConfig, SpoolConfig
from cdml_edge.outputs.factory import degraded_parts
from cdml_edge.outputs.mqtt.publisher import MqttPublisher
from cdml_edge.window.topics import OutMessage

pytestmark = pytest.mark.skipif(
    mosquitto_binary() is None, reason="needs Mosquitto: it refuses by its ACL"
)


def _acl(path: Path, prefix: str, results_allowed: bool) -> Path:
    rules = [f"topic read {prefix}/#", f"topic write {prefix}/edge-1/status"]
    rules.append(f"topic write {prefix}/edge-1/cam1/{'#' if results_allowed else 'window'}")
    path.write_text("\n".join(rules) + "\n")
    return path


@dataclass
class Site:
    """A Mosquitto that refuses results (its ACL), a subscriber, the topic prefix."""

    prefix: str
    acl: Path
    broker: BrokerProcess
    sub: Subscriber

    def allow_results(self) -> None:
        """The ACL lets the results through, read again by the broker."""
        _acl(self.acl, self.prefix, results_allowed=True)
        self.broker.reload()


@contextmanager
def _refusing(tmp_path: Path, drops_client: bool = False) -> Iterator[Site]:
    prefix = f"r{uuid.uuid4().hex[:8]}"
    acl = _acl(tmp_path / "acl", prefix, results_allowed=False)
    broker = BrokerProcess(tmp_path / "broker", acl_file=acl, unlimited_queues=drops_client)
    broker.start()
    sub = Subscriber(broker.port, f"{prefix}/#")
    try:
        yield Site(prefix, acl, broker, sub)
    finally:
        sub.close()
        broker.stop()


def _publisher(
    tmp_path: Path,
    site: Site,
    retry: float = 60.0,
    spool: SpoolConfig | None = None,
    qos: Literal[0, 1, 2] = 1,
) -> MqttPublisher:
    """A publisher to ``site``; ``retry``: the first pause after a refusal (up to twice it)."""
    return MqttPublisher(
        MqttConfig(
            url=site.broker.url, topic_prefix=site.prefix, protocol="5", keepalive=5, qos=qos
        ),
        "edge-1",
        spool or SpoolConfig(dir=tmp_path / "spool"),
        refused_retry_min=retry,
        refused_retry_max=2 * retry,
    )


@pytest.mark.parametrize(
    "drops_client",
    [False, True],
    ids=["the broker keeps the connection", "the broker drops the connection too"],
)
def test_a_refused_result_is_spooled_reported_and_sent_once_allowed(
    tmp_path: Path, drops_client: bool
) -> None:
    """Mosquitto 2.0.11 with ``max_queued_messages 0`` also drops the client after a refusal."""
    with _refusing(tmp_path, drops_client) as site:
        pub = _publisher(tmp_path, site, retry=0.3)
        sub, prefix = site.sub, site.prefix
        spooled_when_durable: list[int] = []
        try:
            pub.start()
            assert wait_until(lambda: pub.connected, 10)
            result = OutMessage("cam1/result", b'{"id": "r1"}')
            window = OutMessage("cam1/window", b'{"id": "w1"}')
            pub.publish_batch(
                [result, window], lambda: spooled_when_durable.append(pub.spool.pending)
            )
            assert wait_until(lambda: bool(spooled_when_durable), 10)
            assert spooled_when_durable[0] >= 1  # the refused result was on disk first
            if not drops_client:  # else the window, in flight beside it, waits in the spool
                assert wait_until(lambda: sub.ids("/window") == ["w1"], 10)
            assert sub.ids("/result") == []
            assert pub.stats()["rejected"] >= 1
            why = degraded_parts(pub).get("mqtt", "")
            assert "Not authorized" in why and f"{prefix}/edge-1/cam1/result" in why

            site.allow_results()
            assert wait_until(lambda: sub.ids("/result") == ["r1"], 20), sub.messages
            assert wait_until(lambda: "w1" in sub.ids("/window"), 10)
            assert wait_until(lambda: pub.spool.pending == 0, 10)
            assert wait_until(lambda: "mqtt" not in degraded_parts(pub), 10)
        finally:
            pub.stop(timeout=1)


def test_a_refused_topic_does_not_hold_back_the_rest_of_the_spool(tmp_path: Path) -> None:
    """A backlog of windows and results, results refused: the windows all get through.

    The drain used to pause whole after each refusal: 97 of 2,000 windows in 20 s.
    """
    from cdml_edge.outputs.mqtt.spool_format import SpoolRecord

    with _refusing(tmp_path) as site:
        pub = _publisher(tmp_path, site)
        records = []
        for i in range(500):
            records.append(SpoolRecord("cam1/window", b'{"id": "w%d"}' % i, 1, False))
            records.append(SpoolRecord("cam1/result", b'{"id": "r%d"}' % i, 1, False))
        pub.spool.append(records)
        try:
            pub.start()
            windows = lambda: len(set(site.sub.ids("/window")))  # noqa: E731
            assert wait_until(lambda: windows() == 500, 30), windows()
            assert site.sub.ids("/result") == []
            stats = pub.stats()  # the results wait for their retry, not sent to be refused again
            assert stats["rejected"] < 100 and stats["refused_held"] + stats["rejected"] >= 500
        finally:
            pub.stop(timeout=1)


def test_qos_2_refusals_are_kept_too(tmp_path: Path) -> None:
    """A refusal in a PUBREC: paho went on with PUBREL and reported the message delivered."""
    with _refusing(tmp_path) as site:
        pub = _publisher(tmp_path, site, qos=2)
        durable: list[int] = []
        try:
            pub.start()
            assert wait_until(lambda: pub.connected, 10)
            result = OutMessage("cam1/result", b'{"id": "r1"}')
            pub.publish_batch([result], lambda: durable.append(pub.spool.pending))
            assert wait_until(lambda: bool(durable), 10)
            assert durable == [1] and pub.stats()["rejected"] == 1
            assert "Not authorized" in degraded_parts(pub).get("mqtt", "")
        finally:
            pub.stop(timeout=1)


def test_a_refused_message_the_spool_cannot_take_is_held_not_lost(tmp_path: Path) -> None:
    """A full ``block`` spool: refused results were dropped (live) or stuck (spooled)."""
    with _refusing(tmp_path) as site:
        spool = SpoolConfig(dir=tmp_path / "spool", max_bytes=20_000, policy="block")
        pub = _publisher(tmp_path, site, retry=0.3, spool=spool)
        durable: list[int] = []
        try:
            pub.start()
            assert wait_until(lambda: pub.connected, 10)
            for i in range(25):
                body = b'{"id": "r%d", "pad": "%s"}' % (i, b"x" * 900)
                pub.publish_batch([OutMessage("cam1/result", body)], lambda: durable.append(1))
            assert wait_until(lambda: pub.stats()["rejected"] >= 25, 10)
            site.allow_results()
            results = lambda: len(set(site.sub.ids("/result")))  # noqa: E731
            assert wait_until(lambda: results() == 25, 30), results()
            assert wait_until(lambda: len(durable) == 25, 10)
            assert wait_until(lambda: pub.spool.pending == 0, 10)
        finally:
            pub.stop(timeout=1)
