"""scripts/release/install.sh releases, for real and unprivileged in a temporary prefix.

Two installs of one release hold the same packages; upgrade, rollback, and the automatic
rollback when the new release never becomes ready (a deliberately broken build).

Only systemctl and the account commands are stubs; the stub's ``restart`` really starts the
installed agent (``current/venv/bin/cdml-edge run``) and its ``is-active`` says whether it runs,
so readiness is judged as install.sh judges it on a board: the unit active and ``/healthz``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers.paths import ROOT
from helpers.release_trees import source_tree
from helpers.uv_tool import uv_command

REPO = ROOT
SCRIPT = REPO / "scripts" / "release" / "install.sh"

SYSTEMCTL = """#!/bin/bash
echo "systemctl $*" >> "{calls}"
case "$1" in
  --version) echo "systemd 252" ;;
  restart)
    if [ -f "{pidfile}" ]; then
      pid="$(cat "{pidfile}")"
      kill -TERM "$pid" 2>/dev/null
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null
    fi
    echo "start $(readlink "{prefix}/current")" >> "{calls}"
    "{prefix}/current/venv/bin/cdml-edge" run --config "{etc}/factory.yaml" \\
      >> "{log}" 2>&1 < /dev/null &
    echo $! > "{pidfile}" ;;
  is-active) [ -f "{pidfile}" ] && kill -0 "$(cat "{pidfile}")" 2>/dev/null ;;
esac
exit 0
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Board:
    """A staged board: prefix, config, state and data folders, the stubs, install.sh."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.prefix, self.etc = root / "opt/cdml-edge", root / "etc/cdml-edge"
        self.state, self.data = root / "var/lib/cdml-edge", root / "srv/cdml"
        self.units, self.bin = root / "etc/systemd/system", root / "bin"
        self.calls, self.pidfile = root / "calls.log", root / "agent.pid"
        for d in (self.units, self.bin):
            d.mkdir(parents=True)
        (self.bin / "systemctl").write_text(
            SYSTEMCTL.format(
                calls=self.calls,
                pidfile=self.pidfile,
                prefix=self.prefix,
                etc=self.etc,
                log=root / "agent.log",
            )
        )
        for name in ("useradd", "usermod"):
            (self.bin / name).write_text("#!/bin/sh\nexit 0\n")
        for p in self.bin.iterdir():
            p.chmod(0o755)
        self.port = _free_port()
        self.config = root / "factory.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "state_dir": "${CDML_STATE}",
                    "sources": [{"name": "cam", "path": "${CDML_DATA}/cam", "modality": "image"}],
                    "models": {"image": {"path": "${CDML_MODELS}/digits.onnx"}},
                    "health": {"metrics_port": self.port, "interval": "1s"},
                    "output": {"jsonl": "${CDML_STATE}/out.jsonl"},
                }
            )
        )
        self.env = dict(
            os.environ,
            PATH=f"{self.bin}:{os.environ['PATH']}",
            CDML_UNPRIVILEGED="1",
            CDML_PREFIX=str(self.prefix),
            CDML_ETC=str(self.etc),
            CDML_STATE=str(self.state),
            CDML_DATA=str(self.data),
            CDML_UNIT_DIR=str(self.units),
            CDML_MODELS=str(self.prefix / "models"),
            SYSTEMCTL=str(self.bin / "systemctl"),
            PYTHON=sys.executable,
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            UV=uv_command()[0],
        )

    def install(
        self, *args: str, installer: str = "uv", script: Path = SCRIPT, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, CDML_INSTALLER=installer)
        return subprocess.run(
            ["bash", str(script), "--no-apt", "--board", "pi", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=900,
        )

    def current(self) -> str:
        return os.readlink(self.prefix / "current")

    def healthz(self) -> int:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def stop_agent(self) -> None:
        if self.pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(self.pidfile.read_text()), signal.SIGKILL)

    def freeze(self) -> list[str]:
        py = self.prefix / "current/venv/bin/python"
        res = subprocess.run(
            [*uv_command(), "pip", "freeze", "--python", str(py)],
            capture_output=True,
            text=True,
            check=True,
        )
        return sorted(res.stdout.splitlines())


def _doctor_release(board: Board) -> str:
    res = subprocess.run(
        [
            str(board.prefix / "current/venv/bin/cdml-edge"),
            "doctor",
            "--config",
            str(board.etc / "factory.yaml"),
            "--ascii",
            "--unit",
            str(board.units / "cdml-edge.service"),
        ],
        capture_output=True,
        text=True,
        env=board.env,
        timeout=120,
    )
    return next((ln for ln in res.stdout.splitlines() if " release: " in ln), res.stdout)


def _out(res: subprocess.CompletedProcess[str]) -> str:
    return res.stdout[-4000:] + res.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_installs_of_a_release_hold_the_same_packages(tmp_path: Path) -> None:
    """The same release, installed twice into two prefixes.

    With uv, from the same lock the board's pip installs from; test_systemd_install.py installs
    with pip.
    """
    src = source_tree(tmp_path / "src", "0.1.0")
    frozen = []
    for n in (1, 2):
        board = Board(tmp_path / f"board{n}")
        res = board.install("--from", str(src), "--config", str(board.config), "--no-start")
        assert res.returncode == 0, _out(res)
        assert board.current() == "releases/0.1.0"
        frozen.append(board.freeze())
        lock = (board.prefix / "current/venv/cdml-edge.lock").read_text()
        pinned = {
            ln.split(" ")[0].lower()
            for ln in lock.splitlines()
            if "==" in ln and not ln.startswith((" ", "#"))
        }
        assert pinned <= {f.lower().replace("_", "-") for f in frozen[-1]}, pinned
    assert frozen[0] == frozen[1]
    assert not any(f.startswith("torch") for f in frozen[0])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_checks_run_against_the_installed_release(tmp_path: Path) -> None:
    """Run from the checkout as a user does (``cd cdml-edge; sudo scripts/release/install.sh``).

    The checkout holds no compiled C core; the release's venv does. The installer's own checks
    must import ``cdml_edge`` from the release, not from the folder it is run in.
    """
    src = source_tree(tmp_path / "src", "0.1.0")
    assert not list((src / "cdml_edge/archive/_native").glob("*.so"))
    board = Board(tmp_path / "board")
    res = board.install(
        "--config", str(board.config), "--no-start", script=src / SCRIPT.relative_to(REPO), cwd=src
    )
    assert res.returncode == 0, _out(res)
    assert "native reader: True" in res.stdout, _out(res)
    py = board.prefix / "current/venv/bin/python"
    probe = "from cdml_edge.archive import native_available as n; print(n())"
    assert subprocess.run(
        [py, "-c", probe], cwd=tmp_path, capture_output=True, text=True
    ).stdout == ("True\n")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_upgrade_rollback_and_automatic_rollback(tmp_path: Path) -> None:
    board = Board(tmp_path / "board")
    srcs = {
        v: source_tree(tmp_path / v, v, broken=v == "0.1.2") for v in ("0.1.0", "0.1.1", "0.1.2")
    }
    try:
        res = board.install("--from", str(srcs["0.1.0"]), "--config", str(board.config))
        assert res.returncode == 0, _out(res)
        assert board.current() == "releases/0.1.0"
        (board.state / "keep.txt").write_text("state")
        (board.data / "cam").mkdir(parents=True, exist_ok=True)
        (board.data / "cam/keep.txt").write_text("data")
        config_before = (board.etc / "factory.yaml").read_bytes()

        res = board.install("--upgrade", str(srcs["0.1.1"]), "--ready-timeout", "120")
        assert res.returncode == 0, _out(res)
        assert board.current() == "releases/0.1.1"
        assert "upgraded 0.1.0 -> 0.1.1" in res.stdout
        assert board.healthz() == 200
        assert "release 0.1.1, packages match runtime-cp" in _doctor_release(board)

        res = board.install("--rollback", "--ready-timeout", "120")
        assert res.returncode == 0, _out(res)
        assert (board.current(), os.readlink(board.prefix / "previous")) == (
            "releases/0.1.0",
            "releases/0.1.1",
        )
        assert board.healthz() == 200

        t0 = time.monotonic()
        res = board.install("--upgrade", str(srcs["0.1.2"]), "--ready-timeout", "15")
        assert res.returncode == 1, _out(res)
        assert "release 0.1.2 did not become ready within 15s: rolling back to 0.1.0" in (
            res.stderr
        ), _out(res)
        assert board.current() == "releases/0.1.0"
        # `previous` is what it was before the failed upgrade, not the broken release
        assert os.readlink(board.prefix / "previous") == "releases/0.1.1"
        assert time.monotonic() - t0 < 300
        assert board.healthz() == 200  # the old release serves again
        starts = [c for c in board.calls.read_text().splitlines() if c.startswith("start ")]
        assert starts == [
            "start releases/0.1.0",  # the install
            "start releases/0.1.1",
            "start releases/0.1.0",
            "start releases/0.1.2",
            "start releases/0.1.0",
        ]
        assert (board.prefix / "releases/0.1.2/venv").is_dir()  # kept, for a look
        # state, config and data were not touched by any of it
        assert (board.state / "keep.txt").read_text() == "state"
        assert (board.data / "cam/keep.txt").read_text() == "data"
        assert (board.etc / "factory.yaml").read_bytes() == config_before
    finally:
        board.stop_agent()
