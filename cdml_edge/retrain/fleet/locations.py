"""Where a fleet's retained windows are: a local folder tree or an ``s3://`` prefix.

Appliances upload their retention folders under one root, usually partitioned hive-style
(``device=edge-7/date=2026-12-01/<stem>.window.json`` + ``<stem>.zip``). :func:`list_windows`
walks the root (no catalog needed), pairs each sidecar with the archive listed beside it and
turns the ``key=value`` folders on the way into partition values. A ``date=YYYY-MM-DD``
folder whose day lies wholly outside ``--since``/``--until`` is not walked.

The listing costs nothing but ``LIST`` requests (one per 1,000 keys and folder level on S3;
folders are listed 8 at a time); the windows' own bytes are read later, by read tasks.
"""

from __future__ import annotations

import calendar
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdml_edge.retrain.errors import OptionError
from cdml_edge.store.sidecar import ARCHIVE_SUFFIXES, SIDECAR_SUFFIX

_PARTITION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
LIST_THREADS = 8


@dataclass(frozen=True)
class S3Options:
    """How read tasks reach ``s3://``.

    Picklable; sent to every worker, so a cluster does not depend on the driver's
    environment.
    """

    endpoint_url: str | None = None
    region: str | None = None

    @classmethod
    def from_env(cls) -> S3Options:
        """The process defaults (``CDML_EDGE_S3_ENDPOINT``, ``CDML_EDGE_S3_REGION``)."""
        from cdml_edge.archive.s3.settings import ENDPOINT_ENV, REGION_ENV

        return cls(os.environ.get(ENDPOINT_ENV) or None, os.environ.get(REGION_ENV) or None)


@dataclass(frozen=True)
class WindowRef:
    """One retained window in the fleet: its sidecar, archive and partition values.

    ``archive``: the archive listed beside the sidecar (None when there is none);
    ``partitions``: the partition values of its folder.
    """

    sidecar: str  # path or s3:// URL
    sidecar_bytes: int
    archive: str | None
    archive_bytes: int
    partitions: tuple[tuple[str, str], ...] = ()

    @property
    def folder(self) -> str:
        """The folder (path or ``s3://`` URL) that holds the sidecar."""
        return self.sidecar.rsplit("/", 1)[0]

    def archive_at(self, file: str) -> str:
        """The location of ``file`` (a sidecar's ``archive.file``) beside the sidecar."""
        return f"{self.folder}/{file}"


@dataclass
class Listing:
    """What :func:`list_windows` found: windows in location order, partition keys, cost."""

    windows: list[WindowRef] = field(default_factory=list)
    partition_keys: tuple[str, ...] = ()
    list_requests: int = 0
    pruned_folders: int = 0
    odd_names: int = 0  # files skipped: a name that is not UTF-8


def is_s3(root: str) -> bool:
    """Whether ``root`` is an ``s3://`` URL."""
    return root.startswith("s3://")


def list_windows(
    root: str,
    since: float | None = None,
    until: float | None = None,
    s3: S3Options | None = None,
) -> Listing:
    """Every committed window under ``root`` (sidecar + archive), sorted by location."""
    walker: _LocalWalker | _S3Walker
    walker = _S3Walker(root, s3 or S3Options()) if is_s3(root) else _LocalWalker(root)
    files = dict(walker.files(lambda folder: _keep_folder(folder, since, until)))
    refs = list(_pair(files, walker.prefix))
    keys = sorted({k for r in refs for k, _ in r.partitions})
    return Listing(refs, tuple(keys), walker.requests, walker.pruned, walker.odd_names)


def _pair(files: dict[str, int], prefix: str) -> Iterator[WindowRef]:
    for name in sorted(files):
        if not name.endswith(SIDECAR_SUFFIX):
            continue
        base = name.rsplit("/", 1)[-1]
        if base.startswith("."):
            continue
        stem = name[: -len(SIDECAR_SUFFIX)]
        archive = next(
            (stem + sfx for sfx in ARCHIVE_SUFFIXES.values() if stem + sfx in files), None
        )
        yield WindowRef(
            sidecar=name,
            sidecar_bytes=files[name],
            archive=archive,
            archive_bytes=files[archive] if archive else 0,
            partitions=partitions_of(name[len(prefix) :]),
        )


def partitions_of(relative: str) -> tuple[tuple[str, str], ...]:
    """``key=value`` folders of a path relative to the root, outermost first."""
    out = []
    for part in relative.strip("/").split("/")[:-1]:
        m = _PARTITION.match(part)
        if m:
            out.append((m.group(1), m.group(2)))
    return tuple(out)


def _keep_folder(folder: str, since: float | None, until: float | None) -> bool:
    """False for a ``date=YYYY-MM-DD`` folder wholly outside [since, until)."""
    m = _PARTITION.match(folder)
    if not m or m.group(1) != "date" or not _DATE.match(m.group(2)):
        return True
    try:
        day = calendar.timegm(time.strptime(m.group(2), "%Y-%m-%d"))
    except ValueError:
        return True
    # A window closing just after midnight may sit in the previous day's folder: one hour
    # of slack on each side.
    if since is not None and day + 86400 + 3600 <= since:
        return False
    return not (until is not None and day - 3600 >= until)


class _LocalWalker:
    def __init__(self, root: str) -> None:
        p = Path(root)
        if not p.is_dir():
            raise OptionError(f"{root}: no such folder")
        self.prefix = p.as_posix().rstrip("/") + "/"
        self.requests = 0
        self.pruned = 0
        self.odd_names = 0

    def files(self, keep: Any) -> Iterator[tuple[str, int]]:
        for top, dirs, names in os.walk(self.prefix, followlinks=False):
            kept = sorted(d for d in dirs if not d.startswith(".") and keep(d))
            self.pruned += len([d for d in dirs if not d.startswith(".")]) - len(kept)
            dirs[:] = kept
            for n in names:
                path = os.path.join(top, n)
                if not n.endswith((SIDECAR_SUFFIX, *ARCHIVE_SUFFIXES.values())):
                    continue
                if not _utf8(path):
                    self.odd_names += 1
                    continue
                try:
                    st = os.stat(path, follow_symlinks=False)
                except OSError:
                    continue
                # links and special files too: the read refuses them, named and counted
                # (``refused``), as the local engine does, instead of leaving them unseen
                yield Path(path).as_posix(), st.st_size


class _S3Walker:
    """``LIST`` one folder level at a time (``Delimiter='/'``), folders 8 at a time."""

    def __init__(self, root: str, s3: S3Options) -> None:
        from cdml_edge.archive.s3 import parse_s3_url

        try:
            self.bucket, key = parse_s3_url(root.rstrip("/") + "/")
        except ValueError:
            self.bucket, key = root[5:].split("/", 1)[0], ""
        self.key = key if key.endswith("/") or not key else key + "/"
        self.prefix = f"s3://{self.bucket}/{self.key}"
        self.s3 = s3
        self.requests = 0
        self.pruned = 0
        self.odd_names = 0  # S3 keys are UTF-8
        self._lock = threading.Lock()

    def files(self, keep: Any) -> Iterator[tuple[str, int]]:
        level = [self.key]
        with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="cdml-list") as pool:
            while level:
                nxt: list[str] = []
                for folders, objects in pool.map(self._list_level, level):
                    for f in folders:
                        if keep(f.rstrip("/").rsplit("/", 1)[-1]):
                            nxt.append(f)
                        else:
                            self.pruned += 1
                    yield from objects
                level = sorted(nxt)

    def _list_level(self, prefix: str) -> tuple[list[str], list[tuple[str, int]]]:
        from botocore.exceptions import ClientError

        from cdml_edge.archive.s3.client import RetryPolicy, shared_client
        from cdml_edge.archive.s3.errors import map_client_error

        client = shared_client(self.s3.endpoint_url, self.s3.region, RetryPolicy())
        folders: list[str] = []
        objects: list[tuple[str, int]] = []
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, Delimiter="/"
            )
            for page in pages:
                with self._lock:
                    self.requests += 1
                folders += [p["Prefix"] for p in page.get("CommonPrefixes", ())]
                objects += [
                    (f"s3://{self.bucket}/{o['Key']}", int(o["Size"]))
                    for o in page.get("Contents", ())
                ]
        except ClientError as exc:
            raise map_client_error(exc, self.bucket, prefix, "LIST") from exc
        return folders, objects


def _utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes, kept as surrogates by os.walk
        return False
    return True


def weight(ref: WindowRef) -> int:
    """A window's weight when windows are grouped: its archive and sidecar bytes."""
    return ref.archive_bytes + ref.sidecar_bytes


def group_windows(refs: Iterable[WindowRef], groups: int, weight: Any) -> list[list[WindowRef]]:
    """``refs`` cut into at most ``groups`` runs of consecutive windows of similar weight."""
    items = list(refs)
    if not items:
        return []
    n = max(1, min(groups, len(items)))
    total = sum(max(1, weight(r)) for r in items)
    out: list[list[WindowRef]] = [[]]
    acc = 0
    for r in items:
        w = max(1, weight(r))
        if out[-1] and acc + w / 2 > total * len(out) / n and len(out) < n:
            out.append([])
        out[-1].append(r)
        acc += w
    return out


__all__ = [
    "Listing",
    "S3Options",
    "WindowRef",
    "group_windows",
    "is_s3",
    "list_windows",
    "partitions_of",
    "weight",
]
