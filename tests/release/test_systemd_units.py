"""The systemd units: `systemd-analyze verify`, the security score, and the settings we rely on."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

UNITS = ROOT / "systemd"
UNIT_NAMES = ("cdml-edge.service", "cdml-edge-replay.service", "cdml-edge-replay.timer")
INSTALLED_PREFIX = "/opt/cdml-edge/current/venv"


def systemd_analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:  # a missing tool is a broken test machine, not a reason to skip
        pytest.fail(
            "systemd-analyze not found: install the systemd package (apt-get install -y systemd)"
        )
    return exe


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value given (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    # Join continuation lines (a trailing backslash) first.
    text = path.read_text().replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: key outside a section: {line}"
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def staged_units(tmp_path: Path) -> list[Path]:
    """Copies of the units whose ExecStart points at this venv's cdml-edge (verify checks it)."""
    prefix = str(Path(sys.executable).parent.parent)
    assert (Path(prefix) / "bin" / "cdml-edge").exists(), "cdml-edge console script not installed"
    out = []
    for name in UNIT_NAMES:
        text = (UNITS / name).read_text().replace(INSTALLED_PREFIX, prefix)
        dest = tmp_path / name
        dest.write_text(text)
        out.append(dest)
    return out


def verify(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [systemd_analyze(), "verify", "--man=no", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    res = verify(staged_units(tmp_path))
    # verify returns 0 for unknown keys and unparsable values; any message is a defect.
    assert res.returncode == 0 and res.stderr.strip() == "" and res.stdout.strip() == "", (
        res.stdout + res.stderr
    )


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    service = staged_units(tmp_path)[0]
    service.write_text(service.read_text().replace("WatchdogSec=30s", "WatchdogSec=soon\nFoo=1"))
    res = verify([service])
    assert "WatchdogSec" in res.stderr or "soon" in res.stderr
    assert "Unknown key" in res.stderr


@pytest.mark.parametrize("name", ["cdml-edge.service", "cdml-edge-replay.service"])
def test_security_exposure_is_low(tmp_path: Path, name: str) -> None:
    staged = {p.name: p for p in staged_units(tmp_path)}
    res = subprocess.run(
        [
            systemd_analyze(),
            "security",
            "--offline=true",
            "--threshold=25",
            "--no-pager",
            str(staged[name]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # --threshold=25: fail above an exposure of 2.5 out of 10.
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    assert "Overall exposure level" in res.stdout


def test_agent_unit_settings() -> None:
    unit = parse_unit(UNITS / "cdml-edge.service")
    svc = unit["Service"]

    def one(key: str) -> str:
        assert key in svc, f"cdml-edge.service lacks {key}="
        return svc[key][-1]

    assert one("Type") == "notify"
    assert one("Restart") == "on-failure"
    assert "2" in one("RestartPreventExitStatus").split()
    assert one("WatchdogSec")
    assert one("ExecReload") == "/bin/kill -HUP $MAINPID"
    assert one("ExecStart").endswith("run --config /etc/cdml-edge/factory.yaml")
    assert one("User") == "cdml-edge"
    assert one("StateDirectory") == "cdml-edge"
    assert one("RuntimeDirectory") == "cdml-edge"
    assert one("ProtectSystem") == "strict"
    for key in (
        "NoNewPrivileges",
        "PrivateTmp",
        "ProtectHome",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
    ):
        assert one(key) == "yes", key
    assert one("CapabilityBoundingSet") == ""
    assert "@system-service" in svc["SystemCallFilter"]
    assert set(one("RestrictAddressFamilies").split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert one("MemoryMax")
    # numba's kernel cache follows $STATE_DIRECTORY (/var/lib/cdml-edge/numba): kept over reboots
    assert not any("NUMBA_CACHE_DIR" in e for e in svc["Environment"])
    assert one("LoadCredential") == "mqtt-password:/etc/cdml-edge/mqtt-password"
    rw = " ".join(svc["ReadWritePaths"])
    assert "/srv/cdml" in rw and "/var/lib/cdml-edge" in rw
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_replay_timer_is_nightly() -> None:
    timer = parse_unit(UNITS / "cdml-edge-replay.timer")["Timer"]
    assert timer["Unit"] == ["cdml-edge-replay.service"]
    assert timer["Persistent"] == ["true"]
    res = subprocess.run(
        [systemd_analyze(), "calendar", timer["OnCalendar"][0]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    assert "Normalized form: *-*-* 02:30:00" in res.stdout
    replay = parse_unit(UNITS / "cdml-edge-replay.service")["Service"]
    assert replay["Type"] == ["oneshot"]
    assert replay["ExecStart"][0].startswith(
        "/opt/cdml-edge/current/venv/bin/cdml-edge replay --config /etc/cdml-edge/factory.yaml"
    )
    assert "--since 1d" in replay["ExecStart"][0]


def test_replay_is_skipped_not_failed_without_a_retention_ring(tmp_path: Path) -> None:
    """No ``retention:`` in the configuration: the night's replay is skipped (ExecCondition=).

    ``cdml-edge replay`` exits 2 then ("no retention folder"): run as it is every night, the
    unit failed every night and the board stayed ``degraded``.
    """
    replay = parse_unit(staged_units(tmp_path)[1])["Service"]
    assert "ExecCondition" in replay, "cdml-edge-replay.service runs even with nothing to replay"
    argv = shlex.split(replay["ExecCondition"][-1])
    assert argv[-1] == "/etc/cdml-edge/factory.yaml"
    config = tmp_path / "factory.yaml"
    base = f"state_dir: {tmp_path / 'state'}\noutput: {{jsonl: {tmp_path / 'out.jsonl'}}}\n"
    for text, code in ((base, 1), (base + f"retention: {{dir: {tmp_path / 'ring'}}}\n", 0)):
        config.write_text(text)
        res = subprocess.run([*argv[:-1], str(config)], capture_output=True, text=True, timeout=60)
        # 1..254: the unit is skipped (not failed); 0: the replay runs
        assert res.returncode == code, (text, res.stdout + res.stderr)
