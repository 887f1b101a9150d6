"""A real Ray cluster on this machine, started as operators start one: ``ray start``.

A head node and one worker node joining it with ``ray start --address``, each a process of its
own with its own temporary folder, one CPU, a small object store, every port chosen free and
the dashboard off. Each node runs ``ray start --block`` in a new session; stopping it sends
SIGTERM, then SIGKILL, to that session's processes (found by their session id), so nothing
is left behind even when a test fails, and no other Ray on the machine is touched.

The nodes get the test S3 credentials (as a node's instance role would give them) and the
code under test on ``PYTHONPATH``, but not the S3 endpoint: that travels with each job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.ports import free_port, free_ports

REPO = Path(__file__).resolve().parents[2]
STARTED = "Ray runtime started"
_DROP = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_ADDRESS")
_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class RayNode:
    process: subprocess.Popen[bytes]
    temp: Path
    log: Path


@dataclass
class RayNodes:
    """The running cluster: ``address`` for ``--ray-address``, its nodes."""

    address: str
    nodes: list[RayNode] = field(default_factory=list)


def node_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a node or a driver: the code under test importable."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.update(_CREDENTIALS)
    env.pop("CDML_EDGE_S3_ENDPOINT", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra or {})
    return env


def _ray() -> list[str]:
    script = Path(sys.executable).with_name("ray")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


def node_ports(head_port: int, head: bool) -> list[int]:
    """A node's ports, distinct and free, never ``head_port`` (one drawn twice stops it)."""
    return free_ports(len(_port_names(head)), avoid=(head_port,))


def _port_names(head: bool) -> tuple[str, ...]:
    return (
        "--node-manager-port",
        "--object-manager-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--runtime-env-agent-port",
        "--metrics-export-port",
    ) + (("--dashboard-port",) if head else ())


def _ports(head_port: int, head: bool) -> list[str]:
    names = _port_names(head)
    ports = node_ports(head_port, head)
    return [a for n, p in zip(names, ports, strict=True) for a in (n, str(p))]


def start_node(head_port: int, head: bool) -> RayNode:
    """``ray start --block`` for the head (listening on ``head_port``) or a worker joining it."""
    temp = Path(tempfile.mkdtemp(prefix="cdml-rn-", dir="/tmp" if Path("/tmp").is_dir() else None))
    args = [*_ray(), "start", "--block", "--num-cpus", "1", "--disable-usage-stats"]
    args += ["--node-ip-address", "127.0.0.1", "--temp-dir", str(temp)]
    args += ["--object-store-memory", str(96 << 20), *_ports(head_port, head)]
    if head:
        args += ["--head", "--port", str(head_port), "--include-dashboard=false"]
    else:
        args += ["--address", f"127.0.0.1:{head_port}"]
    log = temp / "node.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=node_env(), start_new_session=True
        )
    return RayNode(proc, temp, log)


def wait_started(node: RayNode, timeout: float = 120.0) -> None:
    """Until the node says it runs; a node that exits or hangs fails the test with its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = node.log.read_text(errors="replace")
        if STARTED in text:
            return
        if node.process.poll() is not None:
            break
        time.sleep(0.5)
    tail = node.log.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"ray start did not come up:\n{tail}")


def _session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` (``ray start`` and everything it started)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":  # field 6: session; field 3: state
            pids.append(int(entry))
    return pids


def stop_node(node: RayNode, grace: float = 5.0) -> None:
    """SIGTERM to the node's session, SIGKILL to what is left after ``grace`` seconds."""
    sid = node.process.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _session_pids(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while _session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _session_pids(sid):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        node.process.wait(timeout=grace)
    shutil.rmtree(node.temp, ignore_errors=True)
    left = _session_pids(sid)
    if left:  # a leak fails the test run rather than slowing the next one down
        raise RuntimeError(f"Ray node processes still running after SIGKILL: {left}")


@pytest.fixture(scope="module")
def ray_nodes() -> Iterator[RayNodes]:
    """A head node and a worker node, 1 CPU each, stopped by their process ids at the end."""
    port = free_port()
    cluster = RayNodes(f"127.0.0.1:{port}")
    try:
        cluster.nodes.append(start_node(port, head=True))
        wait_started(cluster.nodes[0])
        cluster.nodes.append(start_node(port, head=False))
        wait_started(cluster.nodes[1])
        yield cluster
    finally:
        for node in reversed(cluster.nodes):
            stop_node(node)
