"""The release artifacts of ``make dist``, checked: version, CHANGELOG, sdist and wheel.

One version everywhere, a CHANGELOG entry for it, the C sources and the lock in the sdist,
the native reader in the wheel.

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
    if len(wheels) != 1 or not wheels[0].name.startswith(f"cdml_edge-{ver}-"):
        found.append(f"wheel: {[p.name for p in wheels]}, expected one of version {ver}")
    else:
        with zipfile.ZipFile(wheels[0]) as zf:
            if not any(
                n.startswith("cdml_edge/archive/_native/") and n.endswith(".so")
                for n in zf.namelist()
            ):
                found.append(f"{wheels[0].name}: no native reader (.so): a C compiler is needed")
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
