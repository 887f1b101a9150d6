"""The code blocks of README.md and docs/ marked ``<!-- runnable[: NAME] -->`` run as written.

Each block is copied into an empty folder where the setup ``NAME`` first writes the files
the block reads (generated here, nothing downloaded); Python blocks run with this
interpreter in a process of their own, bash blocks with this environment's ``cdml-edge``
first on the ``PATH`` — a block of ``cdml-edge`` commands only runs each command through
the command-line app in this process, so torch is imported once, not per command. Every
Python block must carry ``runnable`` or ``<!-- shown: why -->``, so no block claims to run
without being run. The doctor example's model line is checked against the shipped model.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from helpers.docs_pages import ROOT, Block, cli_env, doc_files, readme_blocks

from cdml_edge import synth
from cdml_edge.archive import pack, write_archive

OWN_TESTS = {"first-example": "test_first_example.py"}  # setups a test of their own runs
RUNNABLE = [
    b
    for b in readme_blocks()
    if b.marker and b.marker.startswith("runnable") and b.setup not in OWN_TESTS
]


def _jpeg(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return buf.tobytes()


def _digit_frame(seed: int = 0) -> np.ndarray:
    glyphs, _, _ = synth.load_digit_glyphs()
    return synth.render_digit(glyphs[seed], np.random.default_rng(seed), 64)


def _colour_images(
    classes: dict[str, tuple[int, int, int]], n: int, seed: int, prefix: str = ""
) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    for cls, colour in classes.items():
        for i in range(n):
            img = np.clip(np.array(colour) + rng.normal(0, 20, (64, 72, 3)), 0, 255)
            out.append((f"{prefix}{cls}/{i:04d}.jpg", _jpeg(img.astype(np.uint8))))
    return out


# -- setups: the files a block reads, written into its working folder ----------------------


def _frame(d: Path) -> None:
    (d / "frame.jpg").write_bytes(_jpeg(_digit_frame()))


def _pets(d: Path) -> None:
    for name, data in _colour_images({"cat": (200, 60, 40), "dog": (40, 60, 200)}, 8, 3):
        (d / "pets" / name).parent.mkdir(parents=True, exist_ok=True)
        (d / "pets" / name).write_bytes(data)


def _window(d: Path) -> None:
    wave = synth.machine_waveform(np.random.default_rng(0), fault=False)
    items = [
        ("cam1/0001.jpg", _jpeg(_digit_frame())),
        ("mic/0001.wav", synth.wav_bytes(wave)),
        ("vib/0001.csv", synth.vibration_csv(1)[0]),
        ("meta/0001.json", json.dumps({"line": 3}).encode()),
        ("log/0001.txt", b"shift A started\n"),
    ]
    (d / "window.zip").write_bytes(pack(items, manifest={"window_id": "cam1-000001"}))


def _train_data(d: Path) -> None:
    frames, labels = synth.digit_images(n=30, seed=1)  # small: it shows the commands work
    write_archive(
        d / "digits.zip",
        [
            (f"{y}/{i:04d}.png", synth.encode_png(im))
            for i, (im, y) in enumerate(zip(frames, labels, strict=True))
        ],
    )
    vib = [(f"normal/{i}.csv", b) for i, b in enumerate(synth.vibration_csv(16, seed=3))]
    vib += [(f"fault/{i}.csv", b) for i, b in enumerate(synth.vibration_csv(8, 3, True))]
    write_archive(d / "vib.zip", vib)


def _models(d: Path) -> None:
    (d / "models").mkdir()
    shutil.copy(ROOT / "models" / "digits.onnx", d / "models" / "digits.onnx")
    _frame(d)


def _trainset(d: Path) -> None:
    """An export with a split whose val/ lacks a class (the case that mislabelled val)."""
    colours = {"dent": (200, 40, 40), "ok": (40, 200, 40), "scratch": (40, 40, 200)}
    items = _colour_images(colours, 8, 5, "train/")
    items += _colour_images({k: colours[k] for k in ("ok", "scratch")}, 4, 6, "val/")
    write_archive(d / "train.zip", items, manifest={"note": "provenance"})


def _factory(d: Path) -> None:
    """The README's first ``factory.yaml`` and the shipped models beside it."""
    first = next(b for b in readme_blocks() if b.setup == "first-example" and b.lang == "yaml")
    (d / "factory.yaml").write_text(first.code)
    shutil.copytree(ROOT / "models", d / "models")


def _samples(d: Path) -> None:
    """A ``factory.yaml`` whose source ``cam1`` holds five digits, and two digits in samples/."""
    shutil.copytree(ROOT / "models", d / "models")
    (d / "factory.yaml").write_text(
        "sources:\n  - {name: cam1, kind: folder, path: incoming/cam1, modality: image}\n"
        "models:\n  image: {path: models/digits.onnx}\n"
    )
    for folder, names in (("incoming/cam1", range(5)), ("samples", (17, 18))):
        (d / folder).mkdir(parents=True)
        for i in names:
            (d / folder / f"part-{i:03d}.jpg").write_bytes(_jpeg(_digit_frame(i % 10)))


SETUPS: dict[str | None, Callable[[Path], None]] = {
    None: lambda d: None,
    "frame": _frame,
    "pets": _pets,
    "pets-readme": _pets,
    "pets-uint8": _pets,
    "pets-ring": _pets,
    "window": _window,
    "train-data": _train_data,
    "models": _models,
    "trainset": _trainset,
    "live": lambda d: None,
    "factory": _factory,
    "samples": _samples,
    "transcript": lambda d: None,
    "loss": lambda d: None,
}


# -- checks beyond "it ran": what the block's comments promise -----------------------------


def _check_pets(d: Path, out: str) -> None:
    lines = out.splitlines()
    assert lines[0] == "16 ['cat', 'dog']"
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines[1:]]
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert (d / "pets.zip").is_file()


def _check_pets_uint8(d: Path, out: str) -> None:
    assert out.strip() == "torch.Size([16, 3, 64, 64]) torch.float32"


def _check_pets_ring(d: Path, out: str) -> None:
    assert out.strip() == "torch.Size([4, 3, 64, 64]) torch.uint8"


def _check_train_data(d: Path, out: str) -> None:
    from cdml_edge.model.spec import load_onnx_model

    assert load_onnx_model(d / "digits.onnx")[1].task == "classifier"
    assert load_onnx_model(d / "vib.onnx")[1].task == "anomaly"  # the anomaly model, exported


def _check_trainset(d: Path, out: str) -> None:
    last = json.loads((d / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["epoch"] == 20 and last["val_items"] == 8
    assert last["val_acc"] > 0.9  # ok/scratch keep their training ids in val/


def _check_pets_readme(d: Path, out: str) -> None:
    assert out.splitlines()[0].startswith("torch.Size([8, 3, 64, 64]) tensor([")


def _check_window(d: Path, out: str) -> None:
    assert out.splitlines() == ["5 cam1-000001", f"1 (224, 224, 3) 20 {synth.VIBRATION_ROWS} 3"]


def _check_loss(d: Path, out: str) -> None:
    names, total = out.split("] ")
    assert names == "['ce', 'recon'" and float(total) > 0  # the total, a number


def _check_live(d: Path, out: str) -> None:
    first, stats = out.splitlines()
    assert first == "True 3 [['belt 0 ok'], ['belt 1 ok'], ['belt 2 ok']]"
    assert stats.startswith("WatchStats(files=3, batches=1,") and "deleted=3" in stats
    assert os.listdir(d / "live_input") == [] and os.listdir(d / "live_batches") == []


CHECKS: dict[str, Callable[[Path, str], None]] = {
    "pets-readme": _check_pets_readme,
    "pets": _check_pets,
    "pets-uint8": _check_pets_uint8,
    "pets-ring": _check_pets_ring,
    "train-data": _check_train_data,
    "trainset": _check_trainset,
    "window": _check_window,
    "live": _check_live,
    "loss": _check_loss,
}


def test_every_python_block_says_whether_it_runs() -> None:
    unmarked = [
        f"{b.page}:{b.line}" for b in readme_blocks() if b.lang == "python" and b.marker is None
    ]
    assert unmarked == [], f"python blocks without a runnable/shown marker: {unmarked}"
    assert {b.setup for b in RUNNABLE} <= set(SETUPS)
    assert all((Path(__file__).parent / test).is_file() for test in OWN_TESTS.values())
    assert len(RUNNABLE) >= 6


def _cli_lines(code: str) -> list[list[str]] | None:
    """The argv of each line when a bash block is only ``cdml-edge`` commands, else None."""
    lines = [shlex.split(ln, comments=True) for ln in code.splitlines()]
    argvs = [ln for ln in lines if ln]
    shell_syntax = any(w in {">", ">>", "|", "&&", "<"} for a in argvs for w in a)
    if argvs and all(a[0] == "cdml-edge" for a in argvs) and not shell_syntax:
        return [a[1:] for a in argvs]
    return None


def _run_cli_lines(argvs: list[list[str]], block: Block) -> str:
    """Each command through the command-line app in this process (torch imported once)."""
    from typer.testing import CliRunner

    from cdml_edge.cli import app

    out = []
    for argv in argvs:
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, f"{block.page} line {block.line}: cdml-edge {argv}\n{res.output}"
        out.append(res.stdout)
    return "".join(out)


def _run_process(block: Block, cwd: Path) -> str:
    env = cli_env()
    if block.lang == "python":
        (cwd / "block.py").write_text(block.code)
        cmd = [sys.executable, "block.py"]
    else:
        assert block.lang == "bash", block
        (cwd / "block.sh").write_text(block.code)
        cmd = ["bash", "-euo", "pipefail", "block.sh"]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"{block.page} line {block.line}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _run_transcript(block: Block) -> None:
    """A console block: each ``$ command`` runs from the repository root, printing what follows."""
    lines = block.code.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")] + [len(lines)]
    assert starts[0] == 0, f"{block.page} line {block.line}: a transcript starts with '$ '"
    for i, j in zip(starts, starts[1:], strict=False):
        done = subprocess.run(
            ["bash", "-c", lines[i][2:]], cwd=ROOT, env=cli_env(), capture_output=True, text=True
        )
        assert done.returncode == 0, f"{block.page} line {block.line + 1 + i}: {done.stderr}"
        assert done.stdout.splitlines() == lines[i + 1 : j], f"{block.page} line {block.line}"


SHELL = {"bash", "sh", "shell", "console"}
YAML = {"yaml", "yml"}


def test_every_shell_block_runs_or_says_why_not() -> None:
    unmarked = [f"{b.page}:{b.line}" for b in readme_blocks() if b.lang in SHELL and not b.marker]
    assert unmarked == [], f"shell blocks without a runnable/shown marker: {unmarked}"


YAML_BLOCKS = [
    b for b in readme_blocks() if b.lang in YAML and not (b.marker or "").startswith("shown")
]


@pytest.mark.parametrize(
    "block", YAML_BLOCKS, ids=[f"{Path(b.page).stem}-line{b.line}" for b in YAML_BLOCKS]
)
def test_yaml_block_is_a_valid_configuration(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every YAML block not marked as shown is (part of) a ``factory.yaml`` the schema accepts.

    Its fields and cross-field rules; the files it names are a board's, not opened here.
    """
    from cdml_edge.config import parse_config

    for name in re.findall(r"\$\{([A-Za-z_]\w*)\}", block.code):
        monkeypatch.setenv(name, "set-here")
    parse_config(yaml.safe_load(block.code), f"{block.page} line {block.line}")


SLOW_SETUPS = {"trainset"}  # blocks that train a model from scratch


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=pytest.mark.slow) if b.setup in SLOW_SETUPS else b for b in RUNNABLE],
    ids=[f"{Path(b.page).stem}-line{b.line}-{b.setup}" for b in RUNNABLE],
)
def test_runnable_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SETUPS[block.setup](tmp_path)
    if block.lang == "console":
        _run_transcript(block)
        return
    argvs = _cli_lines(block.code) if block.lang == "bash" else None
    if argvs is not None:
        monkeypatch.chdir(tmp_path)
        out = _run_cli_lines(argvs, block)
    else:
        out = _run_process(block, tmp_path)
    if block.setup in CHECKS:
        CHECKS[block.setup](tmp_path, out)


def test_doctor_example_shows_the_shipped_model() -> None:
    from cdml_edge.config import parse_config
    from cdml_edge.doctor.model_checks import check_model

    text = "\n".join(p.read_text(encoding="utf-8") for p in doc_files())
    shown = re.search(r"^(✓ model image: .*?) in [0-9.]+ ms(.*)$", text, re.M)
    assert shown, "no model line in the documentation's doctor example"
    cfg = parse_config({"models": {"image": {"path": str(ROOT / "models" / "digits.onnx")}}})
    real = check_model("image", cfg).line(False)
    assert re.sub(r" in [0-9.]+ ms", "", real, count=1) == shown.group(1) + shown.group(2)
