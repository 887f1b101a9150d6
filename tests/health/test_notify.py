"""sd_notify and the progress watchdog against a real AF_UNIX datagram socket."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdml_edge.health import ProgressWatchdog, SdNotifier


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def advance(self, dt: float) -> None:
        with self._lock:
            self.t += dt


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    srv.settimeout(5.0)
    yield srv, path
    srv.close()


def recv_fields(srv: socket.socket) -> list[str]:
    return srv.recv(4096).decode().split("\n")


def drain(srv: socket.socket) -> list[str]:
    """Everything queued right now (non-blocking)."""
    out: list[str] = []
    srv.setblocking(False)
    try:
        while True:
            out.append(srv.recv(4096).decode())
    except BlockingIOError:
        pass
    finally:
        srv.setblocking(True)
        srv.settimeout(5.0)
    return out


def test_messages_reach_the_socket(notify_socket: tuple[socket.socket, str]) -> None:
    srv, path = notify_socket
    n = SdNotifier(environ={"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready("models loaded")
    assert recv_fields(srv) == ["READY=1", "STATUS=models loaded"]
    assert n.status("windows: 3\nqueued: 2")
    assert recv_fields(srv) == ["STATUS=windows: 3 queued: 2"]
    assert n.watchdog()
    assert recv_fields(srv) == ["WATCHDOG=1"]
    assert n.stopping()
    assert recv_fields(srv) == ["STOPPING=1"]
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert n.reloading()
    fields = recv_fields(srv)
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert fields[0] == "RELOADING=1"
    key, value = fields[1].split("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after
    assert n.extend_timeout(2.5)
    assert recv_fields(srv) == ["EXTEND_TIMEOUT_USEC=2500000"]
    n.close()


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")
def test_abstract_socket_address() -> None:
    name = f"cdml-test-{uuid.uuid4().hex}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(b"\0" + name.encode())
    srv.settimeout(5.0)
    try:
        n = SdNotifier(environ={"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert recv_fields(srv) == ["READY=1"]
    finally:
        srv.close()


def test_no_socket_is_a_no_op() -> None:
    n = SdNotifier(environ={})
    assert not n.enabled
    assert n.ready() is False
    assert n.watchdog() is False
    assert n.watchdog_interval() is None


def test_gone_supervisor_is_not_fatal(tmp_path: Path) -> None:
    n = SdNotifier(environ={"NOTIFY_SOCKET": str(tmp_path / "missing.sock")})
    assert n.enabled
    assert n.ready() is False  # logged, not raised


def test_supervisor_that_stops_reading_does_not_block(tmp_path: Path) -> None:
    path = str(tmp_path / "full.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    receiver.bind(path)  # bound, never read: its queue fills up
    try:
        n = SdNotifier(environ={"NOTIFY_SOCKET": path})
        results: list[bool] = []
        for _ in range(500):
            results.append(n.notify("STATUS=" + "x" * 200))
            if not results[-1]:
                break
        assert results[0] is True
        assert results[-1] is False  # dropped once the queue was full, not blocked forever
        received = 0
        receiver.setblocking(False)
        while True:
            try:
                receiver.recv(4096)
            except BlockingIOError:
                break
            received += 1
        assert received == results.count(True)
    finally:
        receiver.close()


def test_watchdog_interval_from_environment() -> None:
    pid = str(os.getpid())
    assert SdNotifier(environ={"WATCHDOG_USEC": "30000000"}).watchdog_interval() == 30.0
    assert (
        SdNotifier(environ={"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": pid}).watchdog_interval()
        == 2.0
    )
    other = str(os.getpid() + 1)
    env = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": other}
    assert SdNotifier(environ=env).watchdog_interval() is None
    assert SdNotifier(environ={"WATCHDOG_USEC": "0"}).watchdog_interval() is None
    assert SdNotifier(environ={"WATCHDOG_USEC": "x"}).watchdog_interval() is None


def test_ping_interval_is_half_the_watchdog(notify_socket: tuple[socket.socket, str]) -> None:
    _, path = notify_socket
    n = SdNotifier(environ={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "10000000"})
    assert ProgressWatchdog(n, 30).interval_s == 5.0
    assert ProgressWatchdog(SdNotifier(environ={}), 30).interval_s is None


def test_stall_logic_idle_busy_progress() -> None:
    clock = FakeClock()
    wd = ProgressWatchdog(SdNotifier(environ={}), stall_after_s=10, clock=clock)
    # Idle for a long time with nothing pending: healthy.
    clock.advance(1000)
    assert wd.state().ok
    # Work arrives; the stall clock starts at its arrival, not at the last progress.
    wd.set_busy(3)
    clock.advance(9)
    assert wd.state().ok
    clock.advance(2)
    st = wd.state()
    assert st.stalled and not st.ok and st.pending == 3
    assert st.last_progress_age_s is None
    wd.progress()
    st = wd.state()
    assert st.ok and st.last_progress_age_s == 0.0 and st.progress_count == 1
    clock.advance(11)
    assert wd.state().stalled  # still pending, no progress since
    wd.set_busy(0)
    assert wd.state().ok  # drained: idle again
    with pytest.raises(ValueError):
        wd.set_busy(-1)
    with pytest.raises(ValueError):
        ProgressWatchdog(SdNotifier(environ={}), 0)


def test_pings_stop_when_the_pipeline_stalls(notify_socket: tuple[socket.socket, str]) -> None:
    """Driven tick by tick on an injected clock: every datagram sent is counted."""
    srv, path = notify_socket
    clock = FakeClock()
    notifier = SdNotifier(environ={"NOTIFY_SOCKET": path})
    wd = ProgressWatchdog(notifier, stall_after_s=30, interval_s=5, clock=clock)

    def ticks(n: int) -> list[str]:
        for _ in range(n):
            wd.tick()
            clock.advance(5)
        return drain(srv)  # AF_UNIX datagrams are queued by the time sendto() returns

    # Idle: every tick pings.
    assert ticks(3) == ["WATCHDOG=1"] * 3
    # Busy and progressing: pings flow.
    wd.set_busy(2)
    assert ticks(4) == ["WATCHDOG=1"] * 4  # 20 s pending, below stall_after
    wd.progress()
    assert ticks(6) == ["WATCHDOG=1"] * 6  # 30 s since progress: the last tick at 25 s
    assert wd.state().stalled  # now 30 s
    # Stuck window: the stall is announced once on STATUS=, then no ping at all.
    got = ticks(10)
    assert len(got) == 1 and got[0].startswith("STATUS=stalled: 2 pending"), got
    assert wd.state().pings_sent == 13
    # Progress resumes: so do the pings, after a STATUS=running.
    wd.progress()
    assert ticks(2) == ["STATUS=running", "WATCHDOG=1", "WATCHDOG=1"]
    assert wd.state().pings_sent == 15
    # Drained: idle is healthy however long it lasts.
    wd.set_busy(0)
    clock.advance(3600)
    assert ticks(2) == ["WATCHDOG=1"] * 2


def test_ping_thread_ticks_and_stops(notify_socket: tuple[socket.socket, str]) -> None:
    """The thread calls tick() every interval; once stopped, no thread is left to ping."""
    srv, path = notify_socket
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": str(os.getpid())}
    wd = ProgressWatchdog(SdNotifier(environ=env), stall_after_s=30)
    assert wd.interval_s == 0.05
    with wd:
        for _ in range(3):
            assert recv_fields(srv) == ["WATCHDOG=1"]  # blocks (5 s cap) until a ping lands
    assert not any(t.name == "cdml-watchdog" for t in threading.enumerate())
    sent = wd.state().pings_sent
    assert sent >= 3
    assert len(drain(srv)) == sent - 3  # every ping counted reached the socket, nothing more
