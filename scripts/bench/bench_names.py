"""Member-name normal form: what it costs to open an archive, figures from one run.

Every reader serves ``./a`` and ``a//b`` as ``a`` and ``a/b`` (``cdml_edge.archive.names``).
This measures, on a ZIP of ``--members`` members (C core and Python path) and a plain tar:

* the share of opening an archive of normal names that the normal-form check takes (in CPU
  time, which a loaded machine disturbs less than wall time);
* opening the same archive with every name stored as ``./name`` (the whole per-name pass),
  as a ratio to normal names;
* the baseline: ``zipfile.ZipFile`` / ``tarfile.open`` on the same bytes, same rounds.

Every figure is the best of ``--repeat`` rounds; rounds interleave the variants so they
share the machine's load. CPU time (``process_time``) is reported beside wall time.
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile
import zipfile
from collections.abc import Callable

from timing import interleaved, load_average

from cdml_edge.archive import open_archive, pack
from cdml_edge.archive.names import normalize_member_names


def _tar(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for n in names:
            info = tarfile.TarInfo(n)
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def _tarfile_open(data: bytes) -> int:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return len(tf.getmembers())


def run(
    label: str,
    normal: bytes,
    dotted: bytes,
    baseline: Callable[[bytes], object],
    names: list[str],
    repeat: int,
) -> None:
    t = interleaved(
        {
            "normal": lambda: open_archive(normal),
            "dotted": lambda: open_archive(dotted),
            "check": lambda: normalize_member_names(names),
            "baseline": lambda: baseline(normal),
        },
        repeat,
    )
    (nw, nc), (dw, dc), (cw, cc), (bw, bc) = t["normal"], t["dotted"], t["check"], t["baseline"]
    print(
        f"{label:<13} open normal {nw * 1e3:7.1f} ms (cpu {nc * 1e3:6.1f})  "
        f"check {cw * 1e3:5.2f} ms (cpu {cc * 1e3:5.2f} = {cc / nc:5.1%} of open)  "
        f"'./' names {dw * 1e3:8.1f} ms (cpu {dc * 1e3:7.1f}) = {dw / nw:4.2f}x normal  "
        f"baseline {bw * 1e3:8.1f} ms (cpu {bc * 1e3:7.1f}) = {bw / nw:5.1f}x ours"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    names = [f"cam{i % 7}/frame_{i:06d}.jpg" for i in range(args.members)]
    dotted = [f"./{n}" for n in names]
    print(f"load average {load_average():.1f}; {args.members} members; best of {args.repeat}")
    zips = (pack([(n, b"x") for n in names], level=1), pack([(n, b"x") for n in dotted], level=1))
    for engine in ("native", "python"):
        os.environ["CDML_EDGE_NATIVE"] = "1" if engine == "native" else "0"
        run(f"zip ({engine})", *zips, lambda b: zipfile.ZipFile(io.BytesIO(b)), names, args.repeat)
    os.environ.pop("CDML_EDGE_NATIVE")
    run("tar", _tar(names), _tar(dotted), _tarfile_open, names, args.repeat)


if __name__ == "__main__":
    main()
