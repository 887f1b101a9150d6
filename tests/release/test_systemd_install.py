"""scripts/release/install.sh: lint, and dry runs that must print every step and change nothing."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import ROOT

from cdml_edge import __version__

SCRIPT = ROOT / "scripts" / "release" / "install.sh"
REPO = SCRIPT.parents[2]
RELEASE = f"/opt/cdml-edge/releases/{__version__}"
# what the stubbed python3 answers to `python3 -c ...` (the version query picks the lock)
LOCK = REPO / "lock" / f"runtime-cp311-{platform.machine()}.txt"
# Commands that change the system: in a dry run none of them may be executed.
MUTATING = (
    "apt-get",
    "useradd",
    "usermod",
    "userdel",
    "systemctl",
    "install",
    "python3",
    "chown",
    "chmod",
    "mv",
    "rm",
    "mktemp",
    "pip",
    "ln",
)


def stubbed_env(tmp_path: Path, uid: int = 0) -> tuple[dict[str, str], Path]:
    """PATH with recording stubs of every mutating command (and of `id -u`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    for name in MUTATING:
        stub = bin_dir / name
        # `systemctl --version` and `python3 -c` (the version query) only read; everything
        # else is recorded.
        read_only = {
            "systemctl": 'if [ "$1" = "--version" ]; then echo "systemd 252"; exit 0; fi\n',
            "python3": 'if [ "$1" = "-c" ]; then echo 311; exit 0; fi\n',
        }
        stub.write_text(f'#!/bin/sh\n{read_only.get(name, "")}echo "{name} $*" >> "{calls}"\n')
        stub.chmod(0o755)
    real_id = shutil.which("id") or "/usr/bin/id"
    id_stub = bin_dir / "id"
    id_stub.write_text(
        f'#!/bin/sh\nif [ "$1" = "-u" ]; then echo {uid}; else exec {real_id} "$@"; fi\n'
    )
    id_stub.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return env, calls


def run_script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60
    )


def commands(stdout: str) -> list[str]:
    return [ln[2:] for ln in stdout.splitlines() if ln.startswith("+ ")]


def test_bash_syntax() -> None:
    res = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_shellcheck() -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    res = subprocess.run([exe, str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_dry_run_install_on_a_pi(tmp_path: Path) -> None:
    env, calls = stubbed_env(tmp_path, uid=1000)  # a dry run needs no root
    res = run_script(env, "--dry-run", "--board", "pi", "--memory-max", "1.5G")
    assert res.returncode == 0, res.stderr
    assert not calls.exists(), f"dry run executed: {calls.read_text()}"
    out = res.stdout
    assert "board: pi" in out and "MemoryMax=1536M" in out
    cmds = commands(out)

    def index(fragment: str) -> int:
        for i, c in enumerate(cmds):
            if fragment in c:
                return i
        raise AssertionError(f"no step with {fragment!r} in:\n" + "\n".join(cmds))

    steps = [
        "apt-get install -y --no-install-recommends python3 python3-venv",
        "useradd --system --user-group",
        "install -d -m 0750 -o root -g cdml-edge /etc/cdml-edge",
        f"python3 -m venv {RELEASE}/venv",
        f"{RELEASE}/venv/bin/pip install --quiet --require-hashes --no-deps -r {LOCK}",
        f"{RELEASE}/venv/bin/pip install --quiet --no-deps {REPO}",
        f"{RELEASE}/venv/bin/pip check --quiet",
        f"install -m 0644 {LOCK} {RELEASE}/venv/cdml-edge.lock",
        f"write {RELEASE}/venv/cdml-edge-release.json",
        f"ln -sfn releases/{__version__} /opt/cdml-edge/.current.new",
        "mv -T /opt/cdml-edge/.current.new /opt/cdml-edge/current",
        "/etc/cdml-edge/factory.yaml",
        "write /etc/cdml-edge/mqtt-password (mode 0600, owner root:root",
        "write /etc/systemd/system/cdml-edge.service (mode 0644",
        "write /etc/systemd/system/cdml-edge-replay.service",
        "write /etc/systemd/system/cdml-edge-replay.timer",
        "write /etc/systemd/system/cdml-edge.service.d/50-memory.conf",
        "systemctl daemon-reload",
        "systemctl enable cdml-edge.service cdml-edge-replay.timer",
        # a restart, not a start: run again on a board where the agent runs, the installer
        # must put the new release, unit and ReadWritePaths= in use (a start changes nothing)
        "systemctl reset-failed cdml-edge.service",
        "systemctl restart cdml-edge.service cdml-edge-replay.timer",
    ]
    positions = [index(s) for s in steps]
    assert positions == sorted(positions), "steps out of order"
    # Runtime dependencies only: no extras, no PyTorch, no GPU wheel swap on a Pi.
    pip = [c for c in cmds if "/bin/pip install" in c]
    assert all("[" not in c and "torch" not in c for c in pip), pip
    assert not any("onnxruntime" in c for c in pip)
    assert "MemoryHigh=1228M" in out
    # The doctor hint: root (reads the root-only password from the folder LoadCredential= uses)
    # judging folders for the service's user.
    assert (
        "sudo env CREDENTIALS_DIRECTORY=/etc/cdml-edge "
        "/opt/cdml-edge/current/venv/bin/cdml-edge doctor --config "
        "/etc/cdml-edge/factory.yaml --user cdml-edge"
    ) in out
    assert "${CREDENTIALS_DIRECTORY:-/etc/cdml-edge}/mqtt-password" in out
    assert "sudo /opt" not in out


def test_dry_run_jetson_swaps_in_the_gpu_wheel(tmp_path: Path) -> None:
    env, calls = stubbed_env(tmp_path)
    wheel = tmp_path / "onnxruntime_gpu-1.19.0-cp310-cp310-linux_aarch64.whl"
    wheel.write_bytes(b"PK")
    res = run_script(
        env, "--dry-run", "--board", "jetson", "--ort-wheel", str(wheel), "--no-apt", "--no-start"
    )
    assert res.returncode == 0, res.stderr
    assert not calls.exists(), calls.read_text()
    cmds = commands(res.stdout)
    assert not any(c.startswith("apt-get") for c in cmds)
    i_pkg = next(i for i, c in enumerate(cmds) if c.endswith(f"--no-deps {REPO}"))
    i_rm = cmds.index(f"{RELEASE}/venv/bin/pip uninstall --yes onnxruntime")
    i_gpu = next(i for i, c in enumerate(cmds) if c.endswith(f"--no-deps {wheel}"))
    assert i_pkg < i_rm < i_gpu
    assert "systemctl enable cdml-edge.service cdml-edge-replay.timer" in cmds
    assert not any("restart" in c or "--now" in c for c in cmds), cmds  # --no-start


def test_dry_run_uninstall(tmp_path: Path) -> None:
    env, calls = stubbed_env(tmp_path)
    res = run_script(env, "--dry-run", "--uninstall")
    assert res.returncode == 0, res.stderr
    assert not calls.exists(), calls.read_text()
    cmds = commands(res.stdout)
    assert "systemctl disable --now cdml-edge.service" in cmds
    assert "rm -f /etc/systemd/system/cdml-edge.service" in cmds
    assert any(c.startswith("rm -rf /opt/cdml-edge/releases /opt/cdml-edge/current") for c in cmds)
    # kept: the configuration, and the models it names
    assert not any("/etc/cdml-edge" in c and c.startswith("rm") for c in cmds)
    assert not any(c.split()[-1] in ("/opt/cdml-edge", "/opt/cdml-edge/models") for c in cmds)
    assert not any(c.startswith("userdel") for c in cmds)
    purge = commands(run_script(env, "--dry-run", "--uninstall", "--purge").stdout)
    assert "rm -rf /opt/cdml-edge /etc/cdml-edge /var/lib/cdml-edge" in purge
    assert "userdel cdml-edge" in purge


def _staged(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """A staged board for install.sh without root: its env, the prefix and the calls log.

    systemctl is a stub that records its calls and says every unit is active.
    """
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    stub = bin_dir / "systemctl"
    stub.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "systemd 252"; exit 0; fi\n'
        f'echo "systemctl $*" >> "{calls}"\n'
    )
    stub.chmod(0o755)
    root = tmp_path / "root"
    prefix = root / "opt/cdml-edge"
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        CDML_UNPRIVILEGED="1",
        CDML_PREFIX=str(prefix),
        CDML_ETC=str(root / "etc/cdml-edge"),
        CDML_STATE=str(root / "var/lib/cdml-edge"),
        CDML_DATA=str(root / "srv/cdml"),
        CDML_UNIT_DIR=str(root / "etc/systemd/system"),
        SYSTEMCTL=str(stub),
        PYTHON=sys.executable,
    )
    return env, prefix, calls


def _release(prefix: Path, name: str) -> Path:
    """A complete release ``name`` under ``prefix`` (its marker file; no real venv)."""
    venv = prefix / "releases" / name / "venv"
    venv.mkdir(parents=True)
    (venv / "cdml-edge-release.json").write_text(f'{{"release": "{name}"}}\n')
    return venv


def test_uninstall_keeps_the_models(tmp_path: Path) -> None:
    """``--uninstall`` keeps what the kept configuration names: the models too.

    A site's own model, copied to /opt/cdml-edge/models as the installer says, may exist
    nowhere else; the releases (the venvs) go.
    """
    env, prefix, _ = _staged(tmp_path)
    _release(prefix, "0.1.0")
    (prefix / "current").symlink_to("releases/0.1.0")
    (prefix / "models").mkdir()
    (prefix / "models/press-line3.onnx").write_bytes(b"a site's own model")
    res = run_script(env, "--uninstall")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (prefix / "models/press-line3.onnx").read_bytes() == b"a site's own model"
    assert not (prefix / "releases").exists() and not (prefix / "current").is_symlink()
    assert f"kept: {prefix}/models" in res.stdout
    res = run_script(env, "--uninstall", "--purge")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not prefix.exists()


def test_a_successful_upgrade_removes_old_releases(tmp_path: Path) -> None:
    """Each release is a venv of about 570 MB: only ``current`` and ``previous`` are kept.

    Kept forever, a few years of upgrades fill a board's SD card.
    """
    env, prefix, calls = _staged(tmp_path)
    for name in ("0.0.8", "0.0.9", "0.1.0", "0.2.0"):  # 0.2.0: built, not yet in use
        _release(prefix, name)
    (prefix / "current").symlink_to("releases/0.1.0")
    (prefix / "previous").symlink_to("releases/0.0.9")
    wheel = tmp_path / "cdml_edge-0.2.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    res = run_script(env, "--upgrade", str(wheel), "--ready-timeout", "20")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "upgraded 0.1.0 -> 0.2.0" in res.stdout
    assert os.readlink(prefix / "current") == "releases/0.2.0"
    assert os.readlink(prefix / "previous") == "releases/0.1.0"
    assert sorted(p.name for p in (prefix / "releases").iterdir()) == ["0.1.0", "0.2.0"]
    assert "systemctl restart cdml-edge.service" in calls.read_text().splitlines()


def test_refusals(tmp_path: Path) -> None:
    env, calls = stubbed_env(tmp_path, uid=1000)
    res = run_script(env)  # a real install as a normal user
    assert res.returncode == 1 and "run as root" in res.stderr
    res = run_script(env, "--purge", "--dry-run")
    assert res.returncode == 1 and "--purge goes with --uninstall" in res.stderr
    res = run_script(env, "--frobnicate")
    assert res.returncode == 1 and "unknown option" in res.stderr
    res = run_script(env, "--dry-run", "--memory-max", "lots")
    assert res.returncode == 1 and "--memory-max" in res.stderr
    res = run_script(env, "--dry-run", "--ort-wheel", str(tmp_path / "missing.whl"))
    assert res.returncode == 1 and "wheel not found" in res.stderr
    assert not calls.exists(), calls.read_text()


def test_stubs_do_catch_a_real_run(tmp_path: Path) -> None:
    """Without --dry-run the same stubs record the calls (so the dry-run checks can fail).

    Every command up to the venv is a stub; the run then stops at the venv's own pip,
    which does not exist here.
    """
    env, calls = stubbed_env(tmp_path, uid=0)
    res = run_script(env, "--no-apt", "--board", "pi")
    assert res.returncode != 0
    recorded = calls.read_text().splitlines()
    assert any(
        c.startswith("install -d -m 0750 -o root -g cdml-edge /etc/cdml-edge") for c in recorded
    ), recorded
    assert f"python3 -m venv {RELEASE}/venv" in recorded
    assert not Path(f"{RELEASE}/venv/bin/pip").exists()


def _checkout_copy(dest: Path) -> Path:
    """The project's tracked files (what a user clones), without build outputs or venvs."""
    repo = SCRIPT.parents[2]
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        src = repo / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.slow
def test_real_unprivileged_install(tmp_path: Path) -> None:
    """A real install into a staging folder; only systemctl and the account commands are stubs.

    A venv with the runtime dependencies (pip, the warm wheel cache), the units, the drop-ins and
    the folders. About a minute on a warm pip cache.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    for name in ("systemctl", "useradd", "usermod"):
        stub = bin_dir / name
        stub.write_text(
            '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "systemd 252"; exit 0; fi\n'
            f'echo "{name} $*" >> "{calls}"\n'
        )
        stub.chmod(0o755)
    root = tmp_path / "root"
    prefix, etc, state = root / "opt/cdml-edge", root / "etc/cdml-edge", root / "var/lib/cdml-edge"
    data, units = root / "srv/cdml", root / "etc/systemd/system"
    units.mkdir(parents=True)
    elsewhere = tmp_path / "line 3"  # a source outside /srv/cdml, with a blank in its name
    cfg = tmp_path / "factory.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "sources": [
                    {  # ${LINE3}: from the unit's EnvironmentFile= (no default)
                        "name": "vib",
                        "path": "${LINE3}/in",
                        "modality": "timeseries",
                        "on_done": "move",
                        "move_to": "${LINE3}/done",
                    },
                    {"name": "cam", "path": "${CDML_DATA}/cam", "modality": "image"},
                ],
                "spool": {"dir": "${CDML_STATE}/spool"},
            }
        )
    )
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        CDML_UNPRIVILEGED="1",
        CDML_PREFIX=str(prefix),
        CDML_ETC=str(etc),
        CDML_STATE=str(state),
        CDML_DATA=str(data),
        CDML_UNIT_DIR=str(units),
        SYSTEMCTL=str(bin_dir / "systemctl"),
        PYTHON=sys.executable,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    # the site's values of the config's ${VAR}s, which the unit reads (EnvironmentFile=): the
    # installer must read them too, or the config is invalid to it and its folders unknown
    etc.mkdir(parents=True)
    (etc / "environment").write_text(f'# the site\nLINE3="{elsewhere}"\n')
    src = _checkout_copy(tmp_path / "src")
    res = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "--no-apt",
            "--board",
            "pi",
            "--memory-max",
            "1G",
            "--from",
            str(src),
            "--config",
            str(cfg),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    venv = prefix / "current/venv"
    assert (prefix / "current").resolve() == prefix / "releases" / __version__
    # Runtime dependencies only: no PyTorch in the venv, and the command works from it.
    probe = subprocess.run(
        [
            str(venv / "bin/python"),
            "-c",
            "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('onnxruntime')"
            " is not None)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["None", "True"]
    version = subprocess.run(
        [str(venv / "bin/cdml-edge"), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("cdml-edge ")
    # Units with the staging paths, and the drop-ins.
    service = (units / "cdml-edge.service").read_text()
    assert f"ExecStart={venv}/bin/cdml-edge run --config {etc}/factory.yaml" in service
    paths = (units / "cdml-edge.service.d/60-paths.conf").read_text()
    # the state folder (spool, retention, quarantine are in it) rather than its parts
    for folder in (elsewhere / "in", elsewhere / "done", data / "cam", state):
        assert f'ReadWritePaths="-{folder}"' in paths or f"ReadWritePaths=-{folder}" in paths, paths
        assert folder.is_dir(), folder
    assert "MemoryMax=1024M" in (units / "cdml-edge.service.d/50-memory.conf").read_text()
    assert (etc / "factory.yaml").read_text() == cfg.read_text()
    recorded = calls.read_text().splitlines()
    assert any(c.startswith("useradd --system") for c in recorded), recorded
    assert "systemctl daemon-reload" in recorded
    i_enable = recorded.index("systemctl enable cdml-edge.service cdml-edge-replay.timer")
    assert recorded.index("systemctl restart cdml-edge.service cdml-edge-replay.timer") > i_enable
    # The doctor from the venv, as the hint says (minus sudo and --user), sees the drop-in cover
    # every folder.
    doctor = subprocess.run(
        [
            "env",
            f"CREDENTIALS_DIRECTORY={etc}",
            str(venv / "bin/cdml-edge"),
            "doctor",
            "--config",
            str(etc / "factory.yaml"),
            "--unit",
            str(units / "cdml-edge.service"),
            "--ascii",
        ],
        capture_output=True,
        text=True,
        env=dict(env, LINE3=str(elsewhere)),  # as the unit's EnvironmentFile= gives it
        timeout=120,
    )
    assert any(ln.startswith("OK   unit paths:") for ln in doctor.stdout.splitlines()), (
        doctor.stdout + doctor.stderr
    )
    # the release, installed from the lock with every package as pinned
    lock = f"runtime-cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}.txt"
    assert (
        f"OK   release: cdml-edge {__version__}, release {__version__}, packages match {lock}"
    ) in doctor.stdout.splitlines(), doctor.stdout


def test_dry_run_upgrade_and_rollback(tmp_path: Path) -> None:
    env, calls = stubbed_env(tmp_path, uid=1000)
    wheel = tmp_path / "cdml_edge-0.2.0-cp311-cp311-linux_aarch64.whl"
    wheel.write_bytes(b"PK")
    res = run_script(env, "--dry-run", "--upgrade", str(wheel), "--ready-timeout", "30")
    assert res.returncode == 0, res.stderr
    assert not calls.exists(), calls.read_text()
    cmds = commands(res.stdout)
    rel = "/opt/cdml-edge/releases/0.2.0"
    steps = [
        f"python3 -m venv {rel}/venv",
        f"{rel}/venv/bin/pip install --quiet --require-hashes --no-deps -r {LOCK}",
        f"{rel}/venv/bin/pip install --quiet --no-deps {wheel}",
        "ln -sfn releases/0.2.0 /opt/cdml-edge/.current.new",
        # a crash loop of the release before must not block the start (start limit)
        "systemctl reset-failed cdml-edge.service",
        "systemctl restart cdml-edge.service",
        "wait up to 30s for READY=1 (systemctl is-active) and /healthz",
    ]
    assert [cmds.index(s) for s in steps] == sorted(cmds.index(s) for s in steps), cmds
    # an upgrade touches neither the configuration, the state nor the units
    assert not any("/etc/" in c or "/var/lib/" in c for c in cmds), cmds
    res = run_script(env, "--dry-run", "--rollback")
    assert res.returncode == 1 and "no previous release" in res.stderr


def test_dry_run_picks_the_wheel_for_the_machine(tmp_path: Path) -> None:
    """``--from dist/`` (make dist: a wheel per architecture) installs this machine's.

    The wheel for this machine's architecture and PYTHON's version; none that fits is an
    error naming what is there.
    """
    env, calls = stubbed_env(tmp_path, uid=1000)
    dist = tmp_path / "dist"
    dist.mkdir()
    arch, other = platform.machine(), "aarch64" if platform.machine() != "aarch64" else "x86_64"
    names = [
        f"cdml_edge-0.3.0-cp311-cp311-manylinux_2_34_{arch}.whl",
        f"cdml_edge-0.3.0-cp311-cp311-manylinux_2_34_{other}.whl",
        f"cdml_edge-0.3.0-cp310-cp310-linux_{arch}.whl",
    ]
    for name in names:
        (dist / name).write_bytes(b"PK")
    (dist / "cdml_edge-0.3.0.tar.gz").write_bytes(b"")
    res = run_script(env, "--dry-run", "--from", str(dist), "--board", "pi")
    assert res.returncode == 0, res.stderr
    assert not calls.exists(), calls.read_text()
    rel = "/opt/cdml-edge/releases/0.3.0"
    assert f"{rel}/venv/bin/pip install --quiet --no-deps {dist / names[0]}" in commands(res.stdout)
    (dist / names[0]).unlink()
    res = run_script(env, "--dry-run", "--from", str(dist), "--board", "pi")
    assert res.returncode == 1
    assert f"no wheel for cp311 on {arch} in {dist}" in res.stderr, res.stderr
    assert names[1] in res.stderr
