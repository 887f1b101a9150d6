"""The ReadWritePaths= drop-in for the configuration's folders, and the doctor's check of it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.paths import ROOT

from cdml_edge.config import load_config
from cdml_edge.doctor import run_checks
from cdml_edge.doctor.unit import main, render_dropin, uncovered, unit_settings, write_paths

UNIT = ROOT / "systemd" / "cdml-edge.service"


def config(tmp: Path, **extra: object) -> Path:
    data = {
        "sources": [
            {"name": "cam", "path": "/data/cam", "modality": "image", "on_done": "delete"},
            {
                "name": "vib",
                "path": "/data/vib",
                "modality": "timeseries",
                "on_done": "move",
                "move_to": "/archive/vib done",
            },
            {"name": "logs", "path": "/srv/cdml/logs", "modality": "text", "on_done": "keep"},
        ],
        "spool": {"dir": "/var/lib/cdml-edge/spool"},
        "retention": {"dir": "/mnt/usb/retention", "max_bytes": "1GiB"},
        "quarantine": {"dir": "/data/cam/quarantine"},
        **extra,
    }
    path = tmp / "factory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def installed_unit(tmp: Path) -> Path:
    unit_dir = tmp / "system"
    unit_dir.mkdir()
    unit = unit_dir / "cdml-edge.service"
    shutil.copy(UNIT, unit)
    return unit


def test_dropin_lists_every_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/cdml-edge")  # as the service sees it
    cfg = load_config(config(tmp_path))
    text = render_dropin(cfg, "/etc/cdml-edge/factory.yaml")
    lines = [ln for ln in text.splitlines() if ln.startswith("ReadWritePaths=")]
    # Sorted, de-duplicated, nested folders folded into their parent, blanks quoted.
    assert lines == [
        'ReadWritePaths="-/archive/vib done"',
        "ReadWritePaths=-/data/cam",
        "ReadWritePaths=-/data/vib",
        "ReadWritePaths=-/mnt/usb/retention",
        "ReadWritePaths=-/srv/cdml/logs",
        "ReadWritePaths=-/var/lib/cdml-edge",
    ]
    assert text.splitlines()[3] == "[Service]"
    assert "WatchdogSec" not in text
    labels = [label for label, _ in write_paths(cfg)]
    assert labels == [
        "state",
        "source cam",
        "source vib",
        "source vib move_to",
        "spool",
        "retention",
        "quarantine",
    ]


def test_watchdog_off_disables_the_unit_watchdog(tmp_path: Path) -> None:
    cfg = load_config(config(tmp_path, health={"watchdog": False}))
    assert "WatchdogSec=0" in render_dropin(cfg).splitlines()


def test_unit_alone_keeps_outside_folders_read_only_until_the_dropin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/cdml-edge")  # as the service sees it
    cfg = load_config(config(tmp_path))
    unit = installed_unit(tmp_path)
    missing = {label for label, _ in uncovered(cfg, unit)}
    # /srv/cdml and /var/lib/cdml-edge are in the unit; the rest is read-only without a drop-in.
    assert missing == {"source cam", "source vib", "source vib move_to", "retention", "quarantine"}
    check = run_checks(cfg, unit=unit, euid=1000)
    unit_check = next(c for c in check if c.name == "unit paths")
    assert not unit_check.ok and "/mnt/usb/retention" in unit_check.detail

    dropins = unit.parent / "cdml-edge.service.d"
    dropins.mkdir()
    (dropins / "60-paths.conf").write_text(render_dropin(cfg))
    assert uncovered(cfg, unit) == []
    assert "-/archive/vib done" in unit_settings(unit)["ReadWritePaths"][-6]
    unit_check = next(c for c in run_checks(cfg, unit=unit, euid=1000) if c.name == "unit paths")
    assert unit_check.ok, unit_check

    # An empty ReadWritePaths= in a later drop-in resets the list, as systemd does.
    (dropins / "90-reset.conf").write_text("[Service]\nReadWritePaths=\n")
    assert {label for label, _ in uncovered(cfg, unit)} >= {"source cam", "retention"}


def test_dropin_verifies_with_systemd(tmp_path: Path) -> None:
    exe = shutil.which("systemd-analyze")
    assert exe is not None, "systemd-analyze not found (apt-get install -y systemd)"
    cfg = load_config(config(tmp_path))
    unit = installed_unit(tmp_path)
    dropins = unit.parent / "cdml-edge.service.d"
    dropins.mkdir()
    env = {"SYSTEMD_UNIT_PATH": f"{unit.parent}:", "PATH": "/usr/bin:/bin"}

    def complaints(text: str) -> list[str]:
        (dropins / "60-paths.conf").write_text(text)
        res = subprocess.run(
            [exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, env=env
        )
        return [ln for ln in res.stderr.splitlines() if "60-paths.conf" in ln]

    # The control: systemd does read the drop-in and reports what it cannot use.
    assert complaints("[Service]\nReadWritePaths=relative/path\n")
    assert complaints(render_dropin(cfg)) == []


def test_module_cli(tmp_path: Path, capsys: object) -> None:
    path = config(tmp_path)
    assert main(["dropin", str(path)]) == 0
    assert main(["dirs", str(path)]) == 0
    assert main(["nope", str(path)]) == 2
