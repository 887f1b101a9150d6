"""Loopback ports for test servers."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import time
from pathlib import Path


def free_port() -> int:
    """A free loopback port, from the kernel's ephemeral range."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(n: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """``n`` distinct free loopback ports, none in ``avoid``.

    Calls of :func:`free_port` one after another may get the same port back (each socket is
    closed before the next bind): here every socket stays bound until all ``n`` are drawn.
    """
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            sock = socket.socket()
            held.append(sock)  # bound until the end, a port in ``avoid`` included
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in avoid:
                ports.append(port)
        return ports
    finally:
        for sock in held:
            sock.close()


def restartable_port() -> int:
    """A free loopback port below the kernel's ephemeral range, for a broker a test restarts.

    ``bind(0)`` and every outgoing connection take ports from the ephemeral range (32768-60999
    by default): while a test's broker is down, another test's client may take its port, and
    the broker cannot listen there again ("Address already in use"). Below that range only
    an explicit bind takes a port.
    """
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(500):
        port = rng.randint(max(1024, low - 12000), low - 1)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return free_port()
