"""The release artifacts of ``make dist``, checked: version, CHANGELOG, sdist and wheel.

One version everywhere, a CHANGELOG entry for it, the C sources and the lock in the sdist,
the native reader in each wheel (one per architecture: this machine's, and the aarch64 one
that ``make dist`` builds in the arm64 root where it can).

    python scripts/release/check_dist.py dist/

Exit 0 when the artifacts are a release; one line per problem otherwise.
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SDIST_NEEDS = (
    "cdml_edge/archive/_native/cffi_build.py",
    "setup.py",
    "CHANGELOG.md",
    "scripts/release/install.sh",
    "systemd/cdml-edge.service",
    "lock/runtime-cp310-aarch64.txt",
)


def version() -> str:
    text = (REPO / "cdml_edge/__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    assert found, "no __version__ in cdml_edge/__init__.py"
    return found[1]


def problems(dist: Path, ver: str) -> list[str]:
    found = []
    if not re.search(rf"^## {re.escape(ver)}\b", (REPO / "CHANGELOG.md").read_text(), re.M):
        found.append(f"CHANGELOG.md has no '## {ver}' entry")
    sdists, wheels = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl"))
    if [p.name for p in sdists] != [f"cdml_edge-{ver}.tar.gz"]:
        found.append(f"sdist: {[p.name for p in sdists]}, expected cdml_edge-{ver}.tar.gz")
    else:
        with tarfile.open(sdists[0]) as tf:
            names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
        found += [f"sdist lacks {n}" for n in SDIST_NEEDS if n not in names]
        if not any(n.startswith("cdml_edge/archive/_native/") and n.endswith(".c") for n in names):
            found.append("sdist lacks the C sources of the native reader")
    return found + wheel_problems(wheels, ver)


def _arch(wheel: str) -> str:
    """``x86_64`` of ``...-linux_x86_64.whl``, ``aarch64`` of ``...-manylinux_2_34_aarch64.whl``."""
    plat = wheel.removesuffix(".whl").rsplit("-", 1)[-1].split(".")[0]
    found = re.search(r"(x86_64|aarch64|armv7l|i686|ppc64le|s390x)$", plat)
    return found[1] if found else plat


def wheel_problems(wheels: list[Path], ver: str) -> list[str]:
    """One wheel of ``ver`` per architecture (x86_64, aarch64), each with the native reader."""
    found = []
    arches = [_arch(w.name) for w in wheels]
    if not wheels or len(set(arches)) != len(wheels):
        found.append(f"wheel: {[p.name for p in wheels]}, expected one per architecture")
    for w in wheels:
        if not w.name.startswith(f"cdml_edge-{ver}-"):
            found.append(f"wheel: {w.name}, expected version {ver}")
            continue
        with zipfile.ZipFile(w) as zf:
            if not any(
                n.startswith("cdml_edge/archive/_native/") and n.endswith(".so")
                for n in zf.namelist()
            ):
                found.append(f"{w.name}: no native reader (.so): a C compiler is needed")
    return found


def main() -> int:
    dist = Path(sys.argv[1] if len(sys.argv) > 1 else "dist")
    ver = version()
    found = problems(dist, ver)
    print(
        "\n".join(found) or f"release {ver}: " + ", ".join(sorted(p.name for p in dist.iterdir()))
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
