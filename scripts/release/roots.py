"""Debian bookworm roots for the board checks: built once with debootstrap, then cached.

    python scripts/release/roots.py arm64|amd64     # build (or find) the root; print its path

``arm64``: the userland of a Raspberry Pi (Pi OS 12 is Debian bookworm: Python 3.11, the arm64
gcc, libzstd), run on an x86-64 machine under qemu-user-static (binfmt_misc). ``amd64``: a
root that boots systemd as PID 1 in ``systemd-nspawn -b``.

A root is kept in ``$CDML_CACHE/roots`` (default ``~/.cache/cdml-edge/roots``), named by a key
of what debootstrap is given (suite, architecture, variant, packages): a change of the package
list makes a new root, the same list finds the old one. The seconds its build took are in
``ROOT/.cdml-root.json``. Needs root (debootstrap, mount); the mirror is the first Debian one
in the apt sources (``CDML_DEBIAN_MIRROR`` overrides).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SUITE = "bookworm"
VARIANT = "minbase"
# arm64: the Pi's Python and what the C core is built with.
# amd64: systemd as PID 1, and what install.sh's apt step installs (so that it finds it).
PACKAGES = {
    "arm64": [
        *("python3", "python3-venv", "python3-dev", "gcc", "libc6-dev", "zlib1g-dev"),
        *("libzstd-dev", "libdeflate0", "patchelf", "ca-certificates"),
        *("zip", "unzip", "zstd"),  # the archive tests' other readers and writers
    ],
    "amd64": [
        *("systemd", "systemd-sysv", "dbus", "ca-certificates", "python3", "python3-venv"),
        *("python3-dev", "build-essential", "libffi-dev", "libzstd-dev", "libdeflate0"),
        *("libsndfile1", "sudo", "procps", "curl"),
    ],
}
QEMU = {"arm64": "qemu-aarch64"}
MARKER = ".cdml-root.json"


def cache_dir() -> Path:
    return Path(os.environ.get("CDML_CACHE", Path.home() / ".cache" / "cdml-edge"))


def key(arch: str) -> str:
    spec = json.dumps([SUITE, arch, VARIANT, sorted(PACKAGES[arch])])
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def root_path(arch: str) -> Path:
    return cache_dir() / "roots" / f"{SUITE}-{arch}-{key(arch)}"


def mirror() -> str:
    """The Debian mirror apt uses here (deb822 or one-line sources)."""
    if os.environ.get("CDML_DEBIAN_MIRROR"):
        return os.environ["CDML_DEBIAN_MIRROR"]
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        if not f.is_file() or f.suffix not in ("", ".list", ".sources"):
            continue
        for line in f.read_text(errors="replace").splitlines():
            words = line.replace("URIs:", " ").split()
            for w in words:
                if w.startswith("http") and w.rstrip("/").endswith("/debian"):
                    return w
    return "http://deb.debian.org/debian"


def missing(arch: str) -> str | None:
    """Why a root of ``arch`` cannot be built or run here, or None."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, mount, chroot)"
    if shutil.which("debootstrap") is None:
        return "no debootstrap (apt-get install debootstrap)"
    if arch in QEMU and shutil.which(f"{QEMU[arch]}-static") is None:
        return f"no {QEMU[arch]}-static (apt-get install qemu-user-static binfmt-support)"
    return None


def enable_binfmt(arch: str) -> None:
    """binfmt_misc mounted and the qemu handler of ``arch`` enabled (for chroot: flag F)."""
    if arch not in QEMU:
        return
    handler = Path("/proc/sys/fs/binfmt_misc") / QEMU[arch]
    if not Path("/proc/sys/fs/binfmt_misc/status").exists():
        subprocess.run(
            ["mount", "binfmt_misc", "-t", "binfmt_misc", "/proc/sys/fs/binfmt_misc"], check=True
        )
    if not handler.exists() or "enabled" not in handler.read_text():
        subprocess.run(["update-binfmts", "--enable", QEMU[arch]], check=True)
    if "enabled" not in handler.read_text():
        raise RuntimeError(f"binfmt_misc: {QEMU[arch]} is not enabled")


def info(root: Path) -> dict:
    try:
        return dict(json.loads((root / MARKER).read_text()))
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def ensure(arch: str, log: Path | None = None) -> Path:
    """The cached root of ``arch``; built first when absent (minutes: see its marker)."""
    why = missing(arch)
    if why:
        raise RuntimeError(why)
    enable_binfmt(arch)
    root = root_path(arch)
    with locked(root):
        if info(root):
            return root
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        cmd = ["debootstrap", f"--arch={arch}", f"--variant={VARIANT}"]
        cmd += [f"--include={','.join(PACKAGES[arch])}", SUITE, str(partial), mirror()]
        t0 = time.monotonic()
        with open(log or os.devnull, "w") as out:
            res = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
        if res.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({res.returncode}): see {log or 'its output'}")
        built = {
            "arch": arch,
            "suite": SUITE,
            "packages": PACKAGES[arch],
            "seconds": round(time.monotonic() - t0),
            "built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        (partial / MARKER).write_text(json.dumps(built) + "\n")
        partial.rename(root)
    return root


def main() -> int:
    arch = sys.argv[1] if len(sys.argv) > 1 else ""
    if arch not in PACKAGES:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = ensure(arch, log=cache_dir() / "roots" / f"debootstrap-{arch}.log")
    print(root, json.dumps(info(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
