"""Guards over the whole command line: ``--help`` and the user errors of every command.

Every ``--help`` works, and every user error of every command is one line on stderr, no
traceback, and the exit code docs/cli.md documents (0 success, 1 the work failed or found a
problem, 2 a usage error, 3 ``run`` could not start).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from cdml_edge import synth
from cdml_edge.archive import write_archive
from cdml_edge.cli import app

EXIT_FAILED, EXIT_USAGE = 1, 2


def _commands() -> Iterator[tuple[list[str], object]]:
    """``([], root)``, then every command and sub-command as its argv words."""
    root = typer.main.get_command(app)
    todo: list[tuple[list[str], object]] = [([], root)]
    while todo:
        words, cmd = todo.pop(0)
        yield words, cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            todo.append(([*words, name], sub))


def test_the_walk_finds_every_command() -> None:
    found = {" ".join(w) for w, _ in _commands()}
    assert {
        "",
        "config",
        "config validate",
        "config schema",
        "run",
        "doctor",
        "scan",
        "pack",
        "train",
        "export-onnx",
        "replay",
        "export",
    } <= found


@pytest.mark.parametrize("words", [w for w, _ in _commands()], ids=lambda w: " ".join(w) or "-")
def test_help_of_every_command(words: list[str]) -> None:
    cmd = dict((" ".join(w), c) for w, c in _commands())[" ".join(words)]
    res = CliRunner().invoke(app, [*words, "--help"])
    assert res.exit_code == 0 and res.exception is None, res.output
    assert res.stdout.startswith(f"Usage: cdml-edge {' '.join(words)}".rstrip()), res.stdout
    assert "Traceback" not in res.output and "<bool>" not in res.output
    for param in getattr(cmd, "params", []):  # a flag is shown as a flag, taking no value
        if getattr(param, "is_flag", False) and not getattr(param, "hidden", False):
            for opt in param.opts:
                line = next(ln for ln in res.stdout.splitlines() if opt in ln)
                assert "<" not in line.split(opt, 1)[1].split("  ")[0], line


@pytest.mark.parametrize("words", [w for w, _ in _commands()], ids=lambda w: " ".join(w) or "-")
def test_help_shows_no_type_artefacts(words: list[str]) -> None:
    """Values are named in capitals (FILE, N, TEXT), never ``<list[Path]>`` or ``[[DIR]]``."""
    out = CliRunner().invoke(app, [*words, "--help"]).stdout
    for artefact in (r"\[\[", r"\]\]", r"<[A-Za-z]", r"list\["):
        assert not re.search(artefact, out), f"{' '.join(words)} --help shows {artefact}:\n{out}"


def test_no_command_shows_the_help() -> None:
    res = CliRunner().invoke(app, [])
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert res.output.startswith("Usage: cdml-edge [OPTIONS] COMMAND") and "Commands:" in res.output
    assert len(res.output.splitlines()) > 10  # the help as it is, not folded into one line


def test_help_through_the_installed_command() -> None:
    """The reported crash: ``cdml-edge export --help`` (rich markup in ``train/val[/test]``)."""
    exe = shutil.which("cdml-edge", path=str(Path(sys.executable).parent))
    assert exe is not None
    proc = subprocess.run([exe, "export", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "train/val[/test]" in proc.stdout and proc.stderr == ""


# -- user errors ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of things a user names: a text file, an image archive, a config, a folder."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "notes.txt").write_text("hello\n")
    (d / "folder").mkdir()
    (d / "folder" / "a.txt").write_text("a")
    frame = synth.encode_png(
        synth.render_digit(
            synth.load_digit_glyphs()[0][0], __import__("numpy").random.default_rng(0), 32
        )
    )
    write_archive(d / "digits.zip", [(f"{c}/{i}.png", frame) for c in "01" for i in range(3)])
    (d / "factory.yaml").write_text("device: {id: t}\nretention: {dir: ring}\n")
    (d / "bad.yaml").write_text("sources: [\n")
    return d


# (argv, exit code, text the one line must hold); paths are relative to the inputs folder
CASES: list[tuple[str, int, str]] = [
    ("config validate missing.yaml", EXIT_USAGE, "missing.yaml"),
    ("config validate notes.txt", EXIT_USAGE, "notes.txt"),
    ("config validate bad.yaml", EXIT_USAGE, "bad.yaml"),
    ("config validate --bogus factory.yaml", EXIT_USAGE, "--bogus"),
    ("config schema --bogus", EXIT_USAGE, "--bogus"),
    ("run --config missing.yaml", EXIT_USAGE, "missing.yaml"),
    ("run --config notes.txt", EXIT_USAGE, "notes.txt"),
    ("run", EXIT_USAGE, "--config"),
    ("run --config factory.yaml --workers 0", EXIT_USAGE, "--workers"),
    ("test --config missing.yaml notes.txt", EXIT_USAGE, "missing.yaml"),
    ("test --config factory.yaml", EXIT_USAGE, "--source"),
    ("test --config factory.yaml missing.jpg", EXIT_USAGE, "missing.jpg"),
    ("tail --config missing.yaml", EXIT_USAGE, "missing.yaml"),
    ("tail --config factory.yaml", EXIT_USAGE, "output.jsonl"),
    ("tail --config factory.yaml --interval 0", EXIT_USAGE, "--interval"),
    ("doctor", EXIT_USAGE, "--config"),
    ("doctor --config factory.yaml --bogus", EXIT_USAGE, "--bogus"),
    ("calibrate folder --config missing.yaml --model m", EXIT_USAGE, "missing.yaml"),
    ("calibrate folder --config factory.yaml --model m", EXIT_USAGE, "models.m: no such model"),
    ("calibrate folder --config factory.yaml", EXIT_USAGE, "--model"),
    (
        "calibrate folder --config factory.yaml --model m --percentile 10",
        EXIT_USAGE,
        "--percentile",
    ),
    ("scan missing.zip", EXIT_USAGE, "missing.zip"),
    ("scan folder", EXIT_USAGE, "folder"),
    ("scan notes.txt", EXIT_FAILED, "notes.txt"),
    ("scan --bogus digits.zip", EXIT_USAGE, "--bogus"),
    ("pack missing out.zip", EXIT_USAGE, "missing"),
    ("pack folder out.rar", EXIT_USAGE, "out.rar"),
    ("pack folder out.zip --level x", EXIT_USAGE, "--level"),
    ("train --data missing.zip --out run", EXIT_USAGE, "missing.zip"),
    ("train --data notes.txt --out run", EXIT_USAGE, "notes.txt"),
    ("train --data digits.zip --out run --modality imag", EXIT_USAGE, "imag"),
    ("train --data digits.zip --out run --modality audio", EXIT_USAGE, "no audio members"),
    ("train --data digits.zip --out run --val-data missing.zip", EXIT_USAGE, "missing.zip"),
    ("train --data digits.zip --out run --image-size 30", EXIT_USAGE, "image_size"),
    ("train --data digits.zip --out run --epochs -1", EXIT_USAGE, "--epochs"),
    ("export-onnx missing.pt out.onnx", EXIT_USAGE, "missing.pt"),
    ("export-onnx notes.txt out.onnx", EXIT_USAGE, "notes.txt"),
    ("export-onnx", EXIT_USAGE, "CHECKPOINT"),
    ("replay --config missing.yaml", EXIT_USAGE, "missing.yaml"),
    ("replay --config bad.yaml", EXIT_USAGE, "bad.yaml"),
    ("replay --config factory.yaml", EXIT_USAGE, "ring"),
    ("replay folder --config factory.yaml --model missing.onnx", EXIT_USAGE, "missing.onnx"),
    ("replay --config factory.yaml --bogus", EXIT_USAGE, "--bogus"),
    ("export missing out.zip", EXIT_USAGE, "missing"),
    ("export folder out.rar", EXIT_USAGE, "out.rar"),
    ("export folder out.zip --split 0.5/0.6", EXIT_USAGE, "--split"),
    ("export folder out.zip --labels missing.csv", EXIT_USAGE, "missing.csv"),
    ("export folder out.zip --filter bogus", EXIT_USAGE, "bogus"),
    ("export folder out.zip --since yesterday", EXIT_USAGE, "--since"),
    ("bogus-command", EXIT_USAGE, "bogus-command"),
]


@pytest.mark.parametrize(("argv", "code", "names"), CASES, ids=[c[0] for c in CASES])
def test_user_error_is_one_line(
    inputs: Path, monkeypatch: pytest.MonkeyPatch, argv: str, code: int, names: str
) -> None:
    monkeypatch.chdir(inputs)
    res = CliRunner().invoke(app, argv.split())
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == code, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    command = max((" ".join(w) for w, _ in _commands() if argv.startswith(" ".join(w))), key=len)
    assert lines[0].startswith(f"cdml-edge {command}:".replace(" :", ":")), lines[0]
    assert names in lines[0] and "Traceback" not in res.output
    assert not (inputs / "out.zip").exists() and not (inputs / "out.rar").exists()


def test_pack_checks_the_format_before_it_draws_a_bar(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws as on a terminal
    res = CliRunner().invoke(app, ["pack", str(inputs / "folder"), str(tmp_path / "out.zip")])
    assert res.exit_code == 0 and "packing" in res.stderr, res.output  # a bar is drawn here
    res = CliRunner().invoke(app, ["pack", str(inputs / "folder"), str(tmp_path / "out.rar")])
    assert res.exit_code == EXIT_USAGE and "packing" not in res.output
    assert res.stderr.splitlines() == [
        f"cdml-edge pack: cannot tell the format from the name '{tmp_path / 'out.rar'}'"
    ]


def test_every_command_has_a_user_error_case() -> None:
    covered = {c[0].split()[0] for c in CASES} | {" ".join(c[0].split()[:2]) for c in CASES}
    for words, cmd in _commands():
        if words and not getattr(cmd, "commands", None):
            assert " ".join(words) in covered, words


def test_doctor_reports_an_invalid_config_as_its_one_failed_check(inputs: Path) -> None:
    """The doctor's output is its report: an unreadable config is its one ``FAIL config`` line.

    That line goes to stdout, where ``--json`` puts the list too; exit 2.
    """
    res = CliRunner().invoke(app, ["doctor", "--config", str(inputs / "missing.yaml"), "--ascii"])
    assert (
        res.exit_code == EXIT_USAGE
        and res.exception is None
        or isinstance(res.exception, SystemExit)
    )
    assert res.stdout.splitlines() == [
        f"FAIL config: {inputs / 'missing.yaml'}: cannot read: No such file or directory"
    ]


def test_a_user_error_through_the_installed_command(inputs: Path) -> None:
    """The reported traceback: ``cdml-edge scan missing.zip`` (it also exited 0 once)."""
    exe = shutil.which("cdml-edge", path=str(Path(sys.executable).parent))
    assert exe is not None
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run(
        [exe, "scan", "missing.zip"],
        cwd=inputs,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == EXIT_USAGE
    assert proc.stderr == "cdml-edge scan: missing.zip: No such file or directory\n"
    assert proc.stdout == ""
