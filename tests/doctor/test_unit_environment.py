"""The doctor reads the unit's ``EnvironmentFile=`` as systemd does, and checks with it.

The service gets the variables of ``/etc/cdml-edge/environment`` (``EnvironmentFile=-...`` in
the shipped unit); a doctor that left them out judged another configuration than the one the
service runs: an unset ``${VAR}``, another folder, a password it could not find. The parser
is tested on real files against the rules of systemd's ``env-file.c`` (and, where a booted
systemd is at hand, against systemd itself); the doctor on the shipped unit.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from helpers import nspawn
from helpers.paths import ROOT
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.doctor import diagnose

if TYPE_CHECKING:
    from cdml_edge.doctor.unit_env import EnvironmentFile

SHIPPED_UNIT = ROOT / "systemd" / "cdml-edge.service"

# (what the file holds, what the service gets): systemd's rules, case by case.
CASES: list[tuple[str, str, dict[str, str]]] = [
    ("plain", "A=1\nB=two words\n", {"A": "1", "B": "two words"}),
    ("blank lines and comments", "\n# a comment\n; another\n   \nA=1\n  # indented\n", {"A": "1"}),
    ("blanks around the key and the value", "  A  =   x y  \n\tB=\tz\t\n", {"A": "x y", "B": "z"}),
    ("an empty value", "A=\nB=  \n", {"A": "", "B": ""}),
    ("a hash after the key is not a comment", "A=x # y\nB=#z\n", {"A": "x # y", "B": "#z"}),
    ("double quotes", 'A="x  y "\nB= "q"  \n', {"A": "x  y ", "B": "q"}),
    ("single quotes", "A='x \"y\" \\n $z'\n", {"A": 'x "y" \\n $z'}),
    (
        "escapes in double quotes",
        r'A="a \"b\" \$c \\ \`d\` \q"' + "\n",
        {"A": 'a "b" $c \\ `d` \\q'},
    ),
    ("escapes unquoted", r"A=a\ b\\c\q" + "\n", {"A": "a b\\cq"}),
    ("an escaped blank at the end stays", "A=x\\ \n", {"A": "x "}),
    ("quotes inside a value are kept", 'A=a"b"c\nB=it\'s\n', {"A": 'a"b"c', "B": "it's"}),
    ("quoted parts are joined", "A='x'\"y\"z\n", {"A": "xyz"}),
    ("a continued line", "A=one \\\n two\n", {"A": "one  two"}),
    ("a quoted value over two lines", 'A="one\ntwo"\nB=3\n', {"A": "one\ntwo", "B": "3"}),
    ("a continued double-quoted line", 'A="one \\\ntwo"\n', {"A": "one two"}),
    ("no final newline", "A=1\nB=last", {"A": "1", "B": "last"}),
    ("CRLF line ends", "A=1\r\nB=2\r\n", {"A": "1", "B": "2"}),
    ("the last assignment wins", "A=1\nA=2\n", {"A": "2"}),
    ("a line without = is skipped", "JUST_A_WORD\nA=1\n", {"A": "1"}),
    ("not variable names", "export A=1\n1X=2\nA-B=3\nC D=4\nOK_1=5\n", {"OK_1": "5"}),
    ("a value may hold = and $", "URL=mqtt://u:p=w@h:1883/$x\n", {"URL": "mqtt://u:p=w@h:1883/$x"}),
    ("a comment may end with a backslash", "# note \\\nA=1\n", {"A": "1"}),
]


def _write(tmp: Path, text: str) -> Path:
    path = tmp / "environment"
    path.write_bytes(text.encode())
    return path


def _read(path: Path, **kwargs: bool) -> EnvironmentFile:
    from cdml_edge.doctor.unit_env import read_environment_file

    return read_environment_file(path, **kwargs)


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_environment_file_is_read_as_systemd_reads_it(
    tmp_path: Path, text: str, expected: dict[str, str]
) -> None:
    assert _read(_write(tmp_path, text)).values == expected


def test_names_that_are_not_variables_are_listed_with_their_line(tmp_path: Path) -> None:
    read = _read(_write(tmp_path, "# site\nexport MQTT_URL=x\nOK=1\n1X=2\n"))
    assert read.values == {"OK": "1"}
    assert read.ignored == [(2, "export MQTT_URL"), (4, "1X")]


def test_before_systemd_254_a_comment_ending_in_a_backslash_goes_on(tmp_path: Path) -> None:
    path = _write(tmp_path, "# note \\\nA=1\nB=2\n")
    assert _read(path, comment_continues=True).values == {"B": "2"}
    assert _read(path, comment_continues=False).values == {"A": "1", "B": "2"}


@pytest.mark.parametrize(
    ("data", "problem"),
    [(b"A=1\nB=caf\xe9\n", "not UTF-8 (line 2)"), (b"A=1\nB=2\0C=3\n", "holds a NUL byte")],
)
def test_a_file_systemd_refuses_whole_is_refused_saying_why(
    tmp_path: Path, data: bytes, problem: str
) -> None:
    from cdml_edge.doctor.unit_env import EnvironmentFileError

    path = tmp_path / "environment"
    path.write_bytes(data)
    with pytest.raises(EnvironmentFileError) as info:
        _read(path)
    assert str(info.value) == f"{path}: {problem}"


# -- the doctor ------------------------------------------------------------------------------


def _unit(tmp: Path, env_line: str | None) -> Path:
    """The shipped unit, its ``EnvironmentFile=`` line replaced (as install.sh rewrites paths)."""
    text = SHIPPED_UNIT.read_text()
    old = "EnvironmentFile=-/etc/cdml-edge/environment"
    assert old in text
    unit = tmp / "system" / "cdml-edge.service"
    unit.parent.mkdir()
    unit.write_text(text.replace(old, env_line or ""))
    return unit


def _config(tmp: Path, port: int) -> Path:
    (tmp / "site" / "cam").mkdir(parents=True, exist_ok=True)
    cfg = {
        "sources": [{"name": "cam", "path": "${CAM_DIR}/cam", "modality": "text"}],
        "state_dir": str(tmp / "state"),
        "spool": {"max_bytes": "${SPOOL_BYTES:-64MiB}"},
        "mqtt": {
            "url": f"mqtt://127.0.0.1:{port}",
            "username": "line3",
            "password_env": "CDML_TEST_BROKER_PASSWORD",
        },
    }
    path = tmp / "factory.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


SITE_FILE = (
    "# Environment of cdml-edge.service\n"
    "CAM_DIR={site}\n"
    'SPOOL_BYTES="1.5e2MiB"\n'
    "CDML_TEST_BROKER_PASSWORD='s3cret # not a comment'\n"
)


def _doctor(config: Path, unit: Path) -> tuple[int, dict[str, dict[str, object]], str]:
    res = CliRunner().invoke(
        app, ["doctor", "--config", str(config), "--unit", str(unit), "--ascii", "--timeout", "3"]
    )
    as_json = CliRunner().invoke(
        app, ["doctor", "--config", str(config), "--unit", str(unit), "--json", "--timeout", "3"]
    )
    return res.exit_code, {c["name"]: c for c in json.loads(as_json.output)}, res.output


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CAM_DIR", "SPOOL_BYTES", "CDML_TEST_BROKER_PASSWORD", "STATE_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)


def test_the_doctor_checks_with_the_variables_of_the_units_environment_file(
    tmp_path: Path, broker_port: int, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "etc" / "environment"
    env_file.parent.mkdir()
    env_file.write_text(SITE_FILE.format(site=tmp_path / "site"))
    config = _config(tmp_path, broker_port)
    unit = _unit(tmp_path, f"EnvironmentFile=-{env_file}")
    # What the shell has does not count: the service gets the file's value.
    monkeypatch.setenv("CAM_DIR", str(tmp_path / "elsewhere"))

    _, checks, text = _doctor(config, unit)
    lines = text.splitlines()
    assert lines[0] == (
        f"OK   unit environment: {unit}: EnvironmentFile=-{env_file}: read, 3 variables applied "
        "(CAM_DIR, CDML_TEST_BROKER_PASSWORD, SPOOL_BYTES)"
    ), text
    assert lines[1] == f"OK   config: {config} valid", text
    assert checks["source cam"]["ok"], checks["source cam"]
    assert f"{tmp_path / 'site' / 'cam'} readable" in str(checks["source cam"]["detail"])
    assert "bound 150.0 MiB" in str(checks["spool folder"]["detail"]), checks["spool folder"]
    assert checks["broker"]["ok"], checks["broker"]  # the password came from the file
    assert "s3cret" not in text  # names only, never values
    # diagnose() gives the environment back as it found it
    assert os.environ["CAM_DIR"] == str(tmp_path / "elsewhere")
    assert "CDML_TEST_BROKER_PASSWORD" not in os.environ


def test_without_the_file_the_doctor_says_so_and_judges_what_the_service_would_get(
    tmp_path: Path, broker_port: int, clean_env: None
) -> None:
    config = _config(tmp_path, broker_port)
    missing = tmp_path / "etc" / "environment"
    unit = _unit(tmp_path, f"EnvironmentFile=-{missing}")
    code, _, text = _doctor(config, unit)
    assert code == 2, text  # ${CAM_DIR} is unset for the service too
    lines = text.splitlines()
    assert lines[0] == (
        f"WARN unit environment: {unit}: EnvironmentFile=-{missing}: absent "
        "(optional: the service starts without it)"
    ), text
    assert lines[1].startswith("FAIL config:") and "CAM_DIR is not set" in lines[1], text


def test_a_required_file_that_is_absent_fails(
    tmp_path: Path, broker_port: int, clean_env: None
) -> None:
    missing = tmp_path / "etc" / "environment"
    unit = _unit(tmp_path, f"EnvironmentFile={missing}")
    report = diagnose(_config(tmp_path, broker_port), unit=unit, timeout_s=3)
    first = report.checks[0]
    assert first.name == "unit environment" and not first.ok and not first.warn
    assert first.detail == (
        f"{unit}: EnvironmentFile={missing}: absent: systemd will not start the service without it"
    )


def test_a_file_the_doctor_cannot_read_is_a_warning_not_a_crash(
    tmp_path: Path, broker_port: int, clean_env: None
) -> None:
    folder = tmp_path / "etc" / "environment"
    folder.mkdir(parents=True)  # a folder where the file should be: unreadable, even for root
    bad = tmp_path / "etc" / "latin1"
    bad.write_bytes(b"CAM_DIR=/caf\xe9\n")
    unit = _unit(tmp_path, f"EnvironmentFile=-{folder}\nEnvironmentFile=-{bad}")
    report = diagnose(_config(tmp_path, broker_port), unit=unit, timeout_s=3)
    first = report.checks[0]
    assert first.name == "unit environment" and first.ok and first.warn, first
    assert f"EnvironmentFile=-{folder}: cannot read it here (Is a directory)" in first.detail
    assert f"EnvironmentFile=-{bad}: not UTF-8 (line 1): systemd skips the file" in first.detail


def test_names_systemd_skips_are_a_warning(
    tmp_path: Path, broker_port: int, clean_env: None
) -> None:
    env_file = tmp_path / "environment"
    env_file.write_text(f"export CAM_DIR={tmp_path / 'site'}\n")
    unit = _unit(tmp_path, f"EnvironmentFile={env_file}")
    report = diagnose(_config(tmp_path, broker_port), unit=unit, timeout_s=3)
    first = report.checks[0]
    assert first.ok and first.warn, first
    assert "read, no variables applied; skipped by systemd: line 1 'export CAM_DIR'" in (
        first.detail
    )
    assert report.config_error  # and ${CAM_DIR} is unset, as for the service


def test_files_are_read_in_order_and_an_empty_setting_resets_the_list(
    tmp_path: Path, broker_port: int, clean_env: None
) -> None:
    first_file, second_file = tmp_path / "a.env", tmp_path / "b.env"
    first_file.write_text("CAM_DIR=/nowhere\nSPOOL_BYTES=1MiB\n")
    second_file.write_text(f"CAM_DIR={tmp_path / 'site'}\n")
    lines = f"EnvironmentFile={first_file}\nEnvironmentFile=-{second_file}"
    unit = _unit(tmp_path, lines)
    checks = {c.name: c for c in diagnose(_config(tmp_path, broker_port), unit=unit).checks}
    assert checks["source cam"].ok, checks["source cam"]
    assert "bound 1.0 MiB" in checks["spool folder"].detail
    dropins = unit.parent / "cdml-edge.service.d"
    dropins.mkdir()
    (dropins / "70-env.conf").write_text(
        f"[Service]\nEnvironmentFile=\nEnvironmentFile={first_file}\n"
    )
    checks = {c.name: c for c in diagnose(_config(tmp_path, broker_port), unit=unit).checks}
    assert str(second_file) not in checks["unit environment"].detail
    assert not checks["source cam"].ok  # /nowhere/cam


# -- against systemd itself -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(nspawn.missing() is not None, reason=str(nspawn.missing()))
@pytest.mark.timeout(600)
def test_the_parser_agrees_with_systemd(tmp_path: Path) -> None:
    """Each case's file, given to a real service (systemd 252 in a booted Debian root)."""
    for i, (_, text, _) in enumerate(CASES):
        (tmp_path / f"case{i}.env").write_bytes(text.encode())
    refused = [b"A=1\nB=caf\xe9\n", b"A=1\nB=2\0C=3\n"]  # not UTF-8, a NUL byte
    for j, data in enumerate(refused):
        (tmp_path / f"refused{j}.env").write_bytes(data)
    run = "systemd-run --wait --pipe -q -p EnvironmentFile="
    box = nspawn.Container("cdml-envfile", {tmp_path: "/cases"}, tmp_path / "boot.log")
    try:
        box.boot()
        version = int(box.sh("systemctl --version").stdout.split()[1])
        script = [
            f"{run}/cases/case{i}.env /usr/bin/env -0 > /cases/case{i}.out"
            for i in range(len(CASES))
        ]
        for j in range(len(refused)):
            script.append(f"{run}/cases/refused{j}.env /bin/true; echo $? > /cases/refused{j}.rc")
            script.append(f"{run}-/cases/refused{j}.env /usr/bin/env > /cases/refused{j}.out")
        box.sh("; ".join(script))
    finally:
        box.poweroff()
    for j in range(len(refused)):
        # required: the service does not start; optional: it starts without the file
        assert (tmp_path / f"refused{j}.rc").read_text().strip() != "0"
        assert "A=1" not in (tmp_path / f"refused{j}.out").read_text().splitlines()
    systemd_own = {"LANG", "PATH", "INVOCATION_ID", "SYSTEMD_EXEC_PID"}
    for i, (name, _, _) in enumerate(CASES):
        raw = (tmp_path / f"case{i}.out").read_bytes().decode()
        pairs = [item.split("=", 1) for item in raw.split("\0") if item]
        got = {k: v for k, v in pairs if k not in systemd_own}
        ours = _read(tmp_path / f"case{i}.env", comment_continues=version < 254)
        assert got == ours.values, (name, shlex.quote(CASES[i][1]))


def test_a_wildcard_reads_every_matching_file_in_name_order(
    tmp_path: Path, broker_port: int, clean_env: None
) -> None:
    folder = tmp_path / "env.d"
    folder.mkdir()
    (folder / "10-site.env").write_text("CAM_DIR=/nowhere\nSPOOL_BYTES=2MiB\n")
    (folder / "20-line.env").write_text(f"CAM_DIR={tmp_path / 'site'}\n")
    unit = _unit(tmp_path, f"EnvironmentFile=-{folder}/*.env")
    checks = {c.name: c for c in diagnose(_config(tmp_path, broker_port), unit=unit).checks}
    env = checks["unit environment"]
    assert env.ok and not env.warn, env
    assert f"({folder / '10-site.env'}): read, 2 variables applied" in env.detail
    assert f"({folder / '20-line.env'}): read, 1 variable applied (CAM_DIR)" in env.detail
    assert checks["source cam"].ok and "bound 2.0 MiB" in checks["spool folder"].detail


# -- install.sh's reading (python -m cdml_edge.doctor.unit --env-file) -----------------------


def test_the_installer_reads_the_site_file_as_systemd_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dirs --env-file``: systemd's values over the process's; a refused file is skipped."""
    from cdml_edge.doctor.unit import main

    site = tmp_path / "site"
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(
        yaml.safe_dump({"sources": [{"name": "a", "path": "${D}/in", "modality": "text"}]})
    )
    env = tmp_path / "environment"
    env.write_text(f"  D = {site}/x\\\ny  \n")
    monkeypatch.setenv("D", str(tmp_path / "process"))
    assert main(["--env-file", str(env), "--systemd", "252", "dirs", str(cfg)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{site}/xy/in"
    env.write_bytes(b"D=/elsewhere\0\n")  # refused whole by systemd: the process's value
    assert main(["--env-file", str(env), "--systemd", "", "dirs", str(cfg)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0] == f"{tmp_path}/process/in"
    assert "holds a NUL byte: systemd skips the file" in out.err
    assert main(["--env-file", str(tmp_path / "absent"), "dirs", str(cfg)]) == 0
    assert main(["--systemd", "new", "dirs", str(cfg)]) == 2
    assert main(["--env-file"]) == 2
    assert os.environ["D"] == str(tmp_path / "process")  # given back
