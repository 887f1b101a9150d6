"""The units under a real systemd: PID 1 of a Debian bookworm container (``systemd-nspawn -b``).

scripts/release/install.sh runs in the container as a user runs it on a board (as root, from
the checkout, packages from the index), then the real ``cdml-edge.service`` is checked:
READY=1 only after the model's warm-up; the watchdog kills and restarts an agent that hangs
(SIGSTOP); ``Restart=`` restarts one that crashes; the sandbox refuses a write outside the
state and data folders; ``systemd-analyze security`` scores it; the journal holds the summary
lines; ``install.sh --upgrade`` to a broken release rolls back by itself.

The tests share one container and one install and run in file order (each leaves the agent
running). Needs root and systemd-nspawn; the root is built on first use (minutes) and cached
(scripts/release/roots.py). 3-9 minutes here (docs/deploy.md, What ran where).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator

import pytest
import yaml
from helpers import nspawn
from helpers.ports import free_port
from helpers.release_trees import source_tree

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("nspawn"),  # one container, tests in file order: one process
    pytest.mark.timeout(1200),  # the first test also boots and installs
    pytest.mark.skipif(nspawn.missing() is not None, reason=str(nspawn.missing())),
]

SRC = "/usr/local/src/cdml-edge"  # the checkout, as a user has it on the board
BROKEN = "/usr/local/src/cdml-edge-broken"  # a release whose agent cannot start
NEXT = "/usr/local/src/cdml-edge-next"  # a later checkout, installed over the running agent
UNIT = "cdml-edge.service"


def _config(port: int) -> str:
    return yaml.safe_dump(
        {
            "device": {"id": "nspawn"},
            "state_dir": "${CDML_STATE}",
            "sources": [
                {
                    "name": "cam",
                    "path": "${CDML_DATA}/cam",
                    "modality": "image",
                    "window": {"seconds": "100ms", "max_items": 8},
                    "on_done": "delete",
                    "stable_seconds": "200ms",
                }
            ],
            "models": {"image": {"path": "${CDML_MODELS}/digits.onnx"}},
            "health": {"metrics_port": port, "interval": "2s"},
            "output": {"jsonl": "${CDML_STATE}/out.jsonl"},
        }
    )


class Board:
    """The container with the appliance installed."""

    def __init__(self, box: nspawn.Container, install_out: str, seconds: float) -> None:
        self.box, self.install_out, self.install_seconds = box, install_out, seconds

    def show(self, *props: str) -> dict[str, str]:
        out = self.box.sh(f"systemctl show {UNIT} " + " ".join(f"-p {p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def main_pid(self) -> int:
        return int(self.show("MainPID")["MainPID"])

    def wait_active(self, timeout: float, other_than: int = 0) -> float:
        """Seconds until the unit is active with a main PID other than ``other_than``."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            s = self.show("ActiveState", "MainPID")
            if s["ActiveState"] == "active" and int(s["MainPID"]) not in (0, other_than):
                return time.monotonic() - t0
            time.sleep(0.5)
        raise AssertionError(f"not active again within {timeout} s: {self.journal()[-3000:]}")

    def journal(self, *args: str) -> str:
        return self.box.sh(f"journalctl --no-pager -u {UNIT} " + " ".join(args)).stdout

    def reset_failed(self) -> None:
        # each test restarts the agent; the unit's start limit (5 in 10 min) counts every start
        self.box.sh(f"systemctl reset-failed {UNIT}", check=False)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    tmp = tmp_path_factory.mktemp("nspawn")
    src = source_tree(tmp / "src", "0.1.0")
    (src / "configs" / "nspawn.yaml").write_text(_config(free_port()))
    broken = source_tree(tmp / "broken", "0.1.1", broken=True)
    nxt = source_tree(tmp / "next", "0.1.2")
    box = nspawn.Container(
        f"cdml-edge-test-{os.getpid()}",  # unique among runs on this machine
        {src: SRC, broken: BROKEN, nxt: NEXT},
        tmp / "console.log",
    )
    try:
        box.boot()
        box.sh("update-ca-certificates >/dev/null")
        t0 = time.monotonic()
        res = box.sh(f"cd {SRC} && scripts/release/install.sh --config configs/nspawn.yaml 2>&1")
        board = Board(box, res.stdout, time.monotonic() - t0)
        print(f"install.sh in the container: {board.install_seconds:.0f} s")
        yield board
    finally:
        box.poweroff()


def test_install_runs_and_checks_the_installed_release(board: Board) -> None:
    out = board.install_out
    assert "native reader: True" in out, out[-3000:]
    assert re.search(r"lock: .*/lock/runtime-cp311-x86_64\.txt", out), out[-3000:]
    s = board.show("ActiveState", "SubState", "StatusText", "Type", "WatchdogUSec")
    assert (s["ActiveState"], s["SubState"], s["Type"]) == ("active", "running", "notify"), s
    assert s["StatusText"] == "running 1 source, 1 model", s
    assert s["WatchdogUSec"] == "30s", s
    assert board.box.sh("readlink /opt/cdml-edge/current").stdout.strip() == "releases/0.1.0"


def test_ready_only_after_the_warm_up(board: Board) -> None:
    """``activating`` until READY=1; READY=1 comes after the model's warm-up is logged."""
    board.reset_failed()
    before = board.main_pid()
    board.box.sh(f"systemctl restart --no-block {UNIT}")
    seen: list[str] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        state = board.box.sh(f"systemctl is-active {UNIT}", check=False).stdout.strip()
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == "active" and board.main_pid() != before:
            break
        time.sleep(0.2)
    assert "activating" in seen and seen[-1] == "active", seen
    assert seen.index("activating") < len(seen) - 1
    s = board.show(
        "InvocationID", "ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic"
    )
    entries = [
        json.loads(line)
        for line in board.journal(f"_SYSTEMD_INVOCATION_ID={s['InvocationID']}", "-o json")
        .strip()
        .splitlines()
    ]
    warm = [e for e in entries if "warmed up in" in str(e.get("MESSAGE", ""))]
    ready = [e for e in entries if "agent ready:" in str(e.get("MESSAGE", ""))]
    assert warm and ready, [e.get("MESSAGE") for e in entries]
    started = int(s["ExecMainStartTimestampMonotonic"])
    active = int(s["ActiveEnterTimestampMonotonic"])
    assert started < int(warm[0]["__MONOTONIC_TIMESTAMP"]) < active, (started, warm[0], active)
    print(f"READY {(active - started) / 1e6:.1f} s after the start; {ready[0]['MESSAGE']}")


def test_watchdog_restarts_a_hung_agent(board: Board) -> None:
    board.reset_failed()
    pid = board.main_pid()
    board.box.sh(f"kill -STOP {pid}")
    took = board.wait_active(150, other_than=pid)
    log = board.journal("--since", "-3min")
    assert "Watchdog timeout" in log, log[-3000:]
    print(f"hung agent (SIGSTOP): active again after {took:.0f} s (WatchdogSec=30s)")
    assert took >= 25


def test_restart_on_a_crash(board: Board) -> None:
    board.reset_failed()
    pid = board.main_pid()
    n0 = int(board.show("NRestarts")["NRestarts"])
    board.box.sh(f"kill -SEGV {pid}")
    took = board.wait_active(120, other_than=pid)
    assert int(board.show("NRestarts")["NRestarts"]) == n0 + 1
    print(f"crashed agent (SIGSEGV): active again after {took:.0f} s (RestartSec=5s)")


def test_the_sandbox_refuses_writes_outside_state_and_data(board: Board) -> None:
    """Writes as the agent's user: in the agent's mount namespace, and outside it.

    The folders outside belong to that user, so only the unit's sandbox
    (``ProtectSystem=strict``) stands between it and them.
    """
    outside = ("/opt/cdml-edge/probe", "/etc/probe", "/var/probe", "/usr/local/probe")
    board.box.sh("install -d -o cdml-edge -g cdml-edge " + " ".join(outside))
    pid = board.main_pid()
    user = "-S $(id -u cdml-edge) -G $(id -g cdml-edge)"
    sandboxed, plain = f"nsenter -t {pid} -m {user} --", f"nsenter -t 1 {user} --"
    for d in ("/var/lib/cdml-edge", "/srv/cdml"):
        board.box.sh(f"{sandboxed} sh -c 'echo x > {d}/probe && rm {d}/probe'")
    for d in outside:
        board.box.sh(f"{plain} sh -c 'echo x > {d}/f'")  # allowed to the user as such
        res = board.box.sh(f"{sandboxed} sh -c 'echo x > {d}/g'", check=False)
        assert res.returncode != 0, d
        assert "Read-only file system" in res.stderr, (d, res.stderr)
    board.box.sh("rm -rf " + " ".join(outside))


def test_security_exposure(board: Board) -> None:
    out = board.box.sh(f"systemd-analyze security --no-pager {UNIT}").stdout
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", out)
    assert m, out[-2000:]
    print(f"systemd-analyze security: {m.group(1)} {m.group(2)}")
    assert float(m.group(1)) <= 2.5, out  # as the offline score in test_systemd_units.py


def test_the_journal_shows_the_summary_lines(board: Board) -> None:
    py = "/opt/cdml-edge/current/venv/bin/python"
    jpegs = (
        "import cv2, numpy as np\n"
        "for i in range(3):\n"
        "    img = (np.random.default_rng(i).random((28, 28)) * 255).astype(np.uint8)\n"
        "    cv2.imwrite(f'/srv/cdml/{i}.jpg', img)\n"
    )
    board.box.sh(f'{py} -c "{jpegs}" && mv /srv/cdml/[0-9].jpg /srv/cdml/cam/')
    t0 = time.monotonic()
    items = 0
    while time.monotonic() - t0 < 60 and items < 3:
        time.sleep(1)
        lines = board.journal("-o cat", "--since", "-2min").splitlines()
        items = sum(
            int(m.group(1)) for ln in lines if (m := re.search(r"summary: \+(\d+) items", ln))
        )
    assert items >= 3, "\n".join(lines[-20:])
    # a stop and a start of its own (the journal of earlier tests' restarts may be rotated)
    board.reset_failed()
    before = board.main_pid()
    board.box.sh(f"systemctl restart {UNIT}")
    board.wait_active(120, other_than=before)
    log = board.journal("-o cat", "--since", "-3min")
    assert "stopped after" in log, log[-3000:]
    assert "agent ready:" in log.split("stopped after", 1)[1], log[-3000:]


def test_upgrade_to_a_broken_release_rolls_back(board: Board) -> None:
    board.reset_failed()
    t0 = time.monotonic()
    res = board.box.sh(
        f"cd {SRC} && scripts/release/install.sh --upgrade {BROKEN} --ready-timeout 60",
        check=False,
        timeout=900,
    )
    took = time.monotonic() - t0
    out = res.stdout + res.stderr
    out += board.box.sh(f"systemctl status --no-pager {UNIT}", check=False).stdout
    out += board.journal("-n 80", "-o short-monotonic")
    assert res.returncode == 1, out[-3000:]
    assert "release 0.1.1 did not become ready within 60s: rolling back to 0.1.0" in out, out
    assert "rolled back to 0.1.0" in out and "is not ready either" not in out, out[-3000:]
    assert board.box.sh("readlink /opt/cdml-edge/current").stdout.strip() == "releases/0.1.0"
    s = board.show("ActiveState", "StatusText")
    assert s == {"ActiveState": "active", "StatusText": "running 1 source, 1 model"}, s
    log = board.journal("--since", "-15min")
    # the broken release crash-looped into the unit's start limit; the old one started anyway
    assert "status=1/FAILURE" in log and "Start request repeated too quickly" in log, log[-3000:]
    print(f"upgrade to a broken release and back by itself: {took:.0f} s")


def test_reload_and_a_configuration_error(board: Board) -> None:
    """``systemctl reload``: a good config applied in place, a bad one refused; exit 2 no loop."""
    board.reset_failed()
    conf = "/etc/cdml-edge/factory.yaml"
    board.box.sh(f"cp {conf} /root/factory.yaml.good")
    pid = board.main_pid()
    try:
        board.box.sh(f"sed -i 's/interval: 2s/interval: 3s/' {conf} && systemctl reload {UNIT}")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            if "reloading" in board.journal("-o cat", "--since", "-1min"):
                break
            time.sleep(0.5)
        board.wait_active(60)
        assert board.main_pid() == pid, board.journal("-n 40")
        board.box.sh(f"echo 'bogus: [' >> {conf} && systemctl reload {UNIT}")
        t0 = time.monotonic()
        while "reload refused" not in board.journal("-o cat", "--since", "-1min"):
            assert time.monotonic() - t0 < 60, board.journal("-n 40")
            time.sleep(0.5)
        assert board.show("ActiveState")["ActiveState"] == "active"
        assert board.main_pid() == pid
        # the invalid file at a start: exit 2, and RestartPreventExitStatus=2 leaves it down
        res = board.box.sh(f"systemctl restart {UNIT}", check=False)
        assert res.returncode != 0
        time.sleep(8)  # past RestartSec=5s
        s = board.show("ActiveState", "ExecMainStatus", "NRestarts")
        assert s == {"ActiveState": "failed", "ExecMainStatus": "2", "NRestarts": "0"}, s
        run = board.show("InvocationID")["InvocationID"]
        said = board.journal(f"_SYSTEMD_INVOCATION_ID={run}", "-o cat")
        assert "cdml-edge run: " in said and "Traceback" not in said, said
    finally:
        board.box.sh(f"cp /root/factory.yaml.good {conf}")
        board.reset_failed()
        board.box.sh(f"systemctl start {UNIT}")


def test_install_run_again_restarts_the_agent_on_the_new_release(board: Board) -> None:
    """``install.sh`` from a later checkout, over the running agent: it runs the new release.

    A plain ``systemctl enable --now`` left the agent of the old release running (and the new
    unit and ReadWritePaths= unused) until some later crash or reboot switched it over.
    """
    board.reset_failed()
    pid = board.main_pid()
    board.box.sh(f"cd {NEXT} && scripts/release/install.sh --no-apt 2>&1", timeout=900)
    board.wait_active(120, other_than=pid)
    args = board.box.sh(f"ps -o args= -p {board.main_pid()}").stdout
    assert "/opt/cdml-edge/releases/0.1.2/venv/bin/" in args, args
    assert board.box.sh("readlink /opt/cdml-edge/current").stdout.strip() == "releases/0.1.2"
