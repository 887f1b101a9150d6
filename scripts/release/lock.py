"""The lock of the runtime dependencies: one hash-pinned file per board Python and architecture.

``lock/runtime-cpXY-ARCH.txt``, every pin with its hashes (``uv pip compile
--generate-hashes``).

    python scripts/release/lock.py            # (re)write every lock file (make lock)
    python scripts/release/lock.py --check    # the locks match pyproject.toml (no network)

A lock file's first line records a digest of the dependencies it was compiled from; ``--check``
fails when pyproject.toml changed since, or when a declared dependency is missing or pinned
outside its bounds, or a pin has no hash.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK_DIR = REPO / "lock"
PYTHONS = ("3.10", "3.11", "3.13")  # JetPack 6, Pi OS Bookworm, Pi OS Trixie / Debian 13
ARCHES = ("x86_64", "aarch64")
GLIBC = "manylinux_2_28"  # JetPack 6 has glibc 2.35, Pi OS Bookworm 2.36
HEADER = "# cdml-edge runtime lock; dependencies digest: "


def project() -> dict:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]


def digest(proj: dict | None = None) -> str:
    """A digest of the runtime dependencies and requires-python, as declared."""
    proj = proj or project()
    text = "\n".join(sorted(proj["dependencies"]) + [proj["requires-python"]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def lock_path(python: str, arch: str) -> Path:
    return LOCK_DIR / f"runtime-cp{python.replace('.', '')}-{arch}.txt"


def compile_lock(python: str, arch: str, uv: list[str]) -> Path:
    out = lock_path(python, arch)
    subprocess.run(
        [
            *uv,
            "pip",
            "compile",
            "--quiet",
            "--generate-hashes",
            "--no-header",
            "--python-version",
            python,
            "--python-platform",
            f"{arch}-{GLIBC}",
            "--output-file",
            str(out),
            "pyproject.toml",
        ],
        cwd=REPO,
        check=True,
    )
    text = out.read_text()
    out.write_text(
        f"{HEADER}{digest()}\n# python {python}, {arch} ({GLIBC}); refresh: make lock\n{text}"
    )
    return out


def pins(path: Path) -> dict[str, Version]:
    """The ``name==version`` pins of a lock file."""
    out: dict[str, Version] = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, _, rest = line.partition("==")
            out[canonicalize_name(name)] = Version(rest.split()[0].split(";")[0].rstrip("\\"))
    return out


def problems(path: Path, proj: dict | None = None) -> list[str]:
    """What is wrong with one lock file against pyproject.toml (empty: it matches)."""
    proj = proj or project()
    text = path.read_text()
    first = text.splitlines()[0] if text else ""
    found = []
    if first != HEADER + digest(proj):
        found.append(f"{path.name}: compiled from other dependencies (run: make lock)")
    pinned = pins(path)
    for dep in map(Requirement, proj["dependencies"]):
        got = pinned.get(canonicalize_name(dep.name))
        if got is None:
            found.append(f"{path.name}: {dep.name} is not pinned")
        elif got not in dep.specifier:
            found.append(f"{path.name}: {dep.name}=={got} is outside {dep.specifier}")
    unhashed = [
        ln
        for ln in text.split("\n")
        if "==" in ln
        and not ln.startswith((" ", "#"))
        and "--hash" not in ln
        and not ln.rstrip().endswith("\\")
    ]
    found += [f"{path.name}: no hash for {ln.split()[0]}" for ln in unhashed]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="check the locks; change nothing")
    args = ap.parse_args()
    targets = [(p, a) for p in PYTHONS for a in ARCHES]
    if args.check:
        found = [
            f"{lock_path(p, a).name}: missing" for p, a in targets if not lock_path(p, a).exists()
        ]
        found += [
            x for p, a in targets if lock_path(p, a).exists() for x in problems(lock_path(p, a))
        ]
        print("\n".join(found) or f"{len(targets)} lock files match pyproject.toml")
        return 1 if found else 0
    LOCK_DIR.mkdir(exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))
    import _venvs

    for p, a in targets:
        print("wrote", compile_lock(p, a, _venvs.uv()).relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
