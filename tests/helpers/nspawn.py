"""A Debian root booted with ``systemd-nspawn -b``: a real systemd as PID 1, for the unit tests.

The root is the cached amd64 one of scripts/release/roots.py, mounted with
``--volatile=overlay`` (writes go to a tmpfs; the cached root is never changed). The
container shares this machine's network (pip reaches the package index, the agent binds
loopback ports here) and trusts this machine's CA certificates (bound in as
``/usr/local/share/ca-certificates/host.crt``). Commands run in it through ``nsenter`` as root,
as from a root shell on the board.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts" / "release"))
import roots  # noqa: E402 - scripts/release on sys.path first

HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"]
ENV += ["LANG=C.UTF-8", "TERM=dumb", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"]


def missing() -> str | None:
    """Why a container cannot be booted here, or None."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn, debootstrap)"
    if shutil.which("systemd-nspawn") is None:
        return "no systemd-nspawn (apt-get install systemd-container)"
    if shutil.which("nsenter") is None:
        return "no nsenter (util-linux)"
    return roots.missing("amd64")


class Container:
    """``systemd-nspawn -b`` of the cached amd64 root; ``binds``: host path -> container path."""

    def __init__(self, name: str, binds: dict[Path, str], log: Path) -> None:
        self.name, self.binds, self.log = name, binds, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader = 0

    def boot(self, timeout: float = 180) -> str:
        root = roots.ensure("amd64", log=self.log.with_suffix(".debootstrap.log"))
        args = [f"--bind={h}:{c}" for h, c in self.binds.items()]
        if HOST_CA.exists():
            args.append(f"--bind-ro={HOST_CA}:/usr/local/share/ca-certificates/host.crt")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["systemd-nspawn", "-q", "-D", str(root), "--volatile=overlay"]
                + ["--register=no", "--keep-unit", "--console=passive", "-M", self.name]
                + [*args, "-b"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        end = time.monotonic() + timeout
        while not self.leader and time.monotonic() < end:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")[-3000:]
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
            with_pid = kids.read_text().split() if kids.exists() else []
            self.leader = int(with_pid[0]) if with_pid else 0
            time.sleep(0.2)
        state = ""
        while time.monotonic() < end:
            res = self.sh("systemctl is-system-running", check=False, timeout=30)
            state = res.stdout.strip()
            if state in ("running", "degraded"):
                return state
            time.sleep(0.5)
        raise AssertionError(f"the container did not boot: {state}")

    def sh(
        self, script: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """``bash -c script`` in the container, as root; with ``check``, fail on exit != 0."""
        res = subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a", "--", "/usr/bin/env", "-i", *ENV]
            + ["/bin/bash", "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"{script} -> exit {res.returncode}\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
            )
        return res

    def poweroff(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.leader:
            self.sh("systemctl poweroff", check=False, timeout=30)
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
