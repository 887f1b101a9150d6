"""The lock (lock/*.txt against pyproject.toml) and what a release reports about it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from helpers.paths import ROOT

from cdml_edge import __version__
from cdml_edge.release import LOCK_FILE, RELEASE_FILE, compare, inspect, read_pins
from cdml_edge.window.payloads import StatusPayload

REPO = ROOT
sys.path.insert(0, str(REPO / "scripts" / "release"))
import lock  # noqa: E402


def test_every_lock_file_matches_pyproject() -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "scripts/release/lock.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout
    expected = {
        f"runtime-cp{p.replace('.', '')}-{a}.txt" for p in lock.PYTHONS for a in lock.ARCHES
    }
    assert {p.name for p in (REPO / "lock").glob("*.txt")} == expected


def test_a_changed_dependency_is_caught(tmp_path: Path) -> None:
    path = lock.lock_path("3.11", "x86_64")
    proj = lock.project()
    assert lock.problems(path, proj) == []
    raised = dict(
        proj,
        dependencies=[
            d.replace("numpy>=", "numpy>=9") if d.startswith("numpy") else d
            for d in proj["dependencies"]
        ],
    )
    found = lock.problems(path, raised)
    assert any("compiled from other dependencies" in p for p in found), found
    assert any(p.endswith("is outside >=91.24") for p in found), found
    added = dict(proj, dependencies=[*proj["dependencies"], "leftpad>=1"])
    assert any("leftpad is not pinned" in p for p in lock.problems(path, added))
    unhashed = tmp_path / path.name
    unhashed.write_text(path.read_text() + "extra==1.0\n")
    assert any("no hash for extra==1.0" in p for p in lock.problems(unhashed, proj))


def test_pins_and_their_comparison() -> None:
    pins = read_pins(
        "# c\nnumpy==2.2.6 \\\n    --hash=sha256:ab\nopencv_python-Headless==4.8 ; "
        "python_version < '3.11'\n    # via x\n"
    )
    assert pins == {"numpy": "2.2.6", "opencv-python-headless": "4.8"}
    installed = {
        "numpy": "2.2.5",
        "pip": "24",
        "cdml-edge": "0.1.0",
        "rich": "13",
        "onnxruntime-gpu": "1.19",
    }
    assert compare(pins, installed, replaced={"onnxruntime-gpu"}) == [
        "numpy 2.2.5 (lock 2.2.6)",
        "opencv-python-headless missing",
        "rich not in the lock",
    ]


def _freeze_lock(dest: Path) -> None:
    """A lock pinning exactly what this venv holds (as install.sh's venv would)."""
    lines = [
        f"{d.metadata['Name']}=={d.version}"
        for d in metadata.distributions()
        if d.metadata["Name"] and d.metadata["Name"] not in ("cdml-edge", "cdml_edge")
    ]
    dest.write_text("\n".join(lines) + "\n")


def test_a_release_venv_reports_match_and_differences(tmp_path: Path) -> None:
    assert inspect(tmp_path).lock_state == "none"
    assert "no lock" in inspect(tmp_path).describe()
    (tmp_path / RELEASE_FILE).write_text(
        json.dumps({"release": "0.9.1", "lock": "runtime-cp311-x86_64.txt", "replaced": []})
    )
    _freeze_lock(tmp_path / LOCK_FILE)
    rel = inspect(tmp_path)
    assert (rel.release, rel.lock_state) == ("0.9.1", "match"), rel.differences
    assert rel.describe() == (
        f"cdml-edge {__version__}, release 0.9.1, packages match runtime-cp311-x86_64.txt"
    )
    text = (
        (tmp_path / LOCK_FILE)
        .read_text()
        .replace(f"numpy=={metadata.version('numpy')}", "numpy==0.0.1")
    )
    (tmp_path / LOCK_FILE).write_text(text)
    rel = inspect(tmp_path)
    assert rel.lock_state == "differs"
    assert f"numpy {metadata.version('numpy')} (lock 0.0.1)" in rel.describe()


def test_status_payload_names_the_release_and_lock_state() -> None:
    doc = json.loads(
        StatusPayload(state="online", version="1", started_at=0, device="d").model_dump_json()
    )
    # a development venv: not an installed release, no lock beside it
    assert doc["release"] is None and doc["lock"] == "none"
    schema = StatusPayload.model_json_schema()
    assert {"release", "lock"} <= set(schema["properties"])


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:9108/healthz"),
        ("0.0.0.0", "http://127.0.0.1:9108/healthz"),
    ],
)
def test_healthz_url_for_the_installer(tmp_path: Path, host: str, url: str) -> None:
    from cdml_edge.doctor.unit import main

    cfg = tmp_path / "f.yaml"
    cfg.write_text(
        f"sources: [{{name: cam, path: {tmp_path}/in, modality: image}}]\n"
        f"health: {{metrics_port: 9108, metrics_host: '{host}'}}\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "cdml_edge.doctor.unit", "healthz", str(cfg)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert res.stdout.strip() == url
    cfg.write_text(f"sources: [{{name: cam, path: {tmp_path}/in, modality: image}}]\n")
    assert main(["healthz", str(cfg)]) == 0


@pytest.mark.slow
def test_dist_is_a_release(tmp_path: Path) -> None:
    """make dist's artifacts: one version everywhere, described in CHANGELOG.md.

    The sdist carries the C sources and the lock, the wheel the native reader.
    """
    import check_dist
    from helpers.uv_tool import uv_command

    subprocess.run(
        [
            *uv_command(),
            "build",
            "--quiet",
            "--sdist",
            "--wheel",
            "--out-dir",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        timeout=600,
    )
    assert check_dist.problems(tmp_path, __version__) == []
    other = check_dist.problems(tmp_path, "9.9.9")
    assert "CHANGELOG.md has no '## 9.9.9' entry" in other
    assert any(p.startswith("sdist:") for p in other)


def test_dist_wheels_one_per_architecture(tmp_path: Path) -> None:
    """make dist: this machine's wheel and the aarch64 one; each must hold the native reader."""
    import zipfile

    import check_dist

    def wheel(name: str, native: bool = True) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("cdml_edge/__init__.py", "")
            if native:
                zf.writestr("cdml_edge/archive/_native/_reader.cpython-311-x.so", b"\0")
        return path

    x86 = wheel("cdml_edge-1.0-cp311-cp311-linux_x86_64.whl")
    arm = wheel("cdml_edge-1.0-cp311-cp311-manylinux_2_34_aarch64.whl")
    assert check_dist.wheel_problems([x86], "1.0") == []
    assert check_dist.wheel_problems([x86, arm], "1.0") == []
    twice = wheel("cdml_edge-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert "one per architecture" in check_dist.wheel_problems([x86, twice], "1.0")[0]
    bare = wheel("cdml_edge-1.0-cp311-cp311-linux_aarch64.whl", native=False)
    assert check_dist.wheel_problems([x86, bare], "1.0") == [
        f"{bare.name}: no native reader (.so): a C compiler is needed"
    ]
