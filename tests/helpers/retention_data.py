"""Test data for retention, replay and export: real window archives packed here."""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Sequence

from cdml_edge.window.manifest import (
    MANIFEST_NAME,
    ItemOutcome,
    ManifestItem,
    WindowManifest,
)
from cdml_edge.window.payloads import item_id


def make_window(
    window_id: str,
    closed_at: float,
    files: Sequence[tuple[str, bytes]],
    source: str = "cam1",
    modality: str = "image",
    labels: Sequence[str | None] | None = None,
    anomaly_scores: Sequence[float | None] | None = None,
    threshold: float = 0.5,
) -> tuple[bytes, WindowManifest]:
    """A ZIP window archive holding ``files`` and its manifest (with results if given)."""
    items = []
    for i, (name, data) in enumerate(files):
        mtime_ns = int((closed_at - 1 + i * 0.01) * 1e9)
        items.append(
            ManifestItem(
                id=item_id(source, name, len(data), mtime_ns),
                member=f"{i:04d}_{name}",
                name=name,
                size=len(data),
                mtime_ns=mtime_ns,
                ts=mtime_ns / 1e9,
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
    manifest = WindowManifest(
        window_id=window_id,
        device="edge-1",
        site="line-3",
        source=source,
        modality=modality,
        opened_at=closed_at - 1,
        closed_at=closed_at,
        items=tuple(items),
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for it, (_, data) in zip(items, files, strict=True):
            zf.writestr(zipfile.ZipInfo(it.member, (2020, 1, 1, 0, 0, 0)), data)
        zf.writestr(zipfile.ZipInfo(MANIFEST_NAME, (2020, 1, 1, 0, 0, 0)), manifest.to_bytes())
    if labels is not None or anomaly_scores is not None:
        results = {}
        for i, it in enumerate(items):
            label = labels[i] if labels is not None else None
            a = anomaly_scores[i] if anomaly_scores is not None else None
            results[it.id] = ItemOutcome(
                label=label,
                score=0.9 if label else None,
                anomaly=a is not None and a > threshold,
                anomaly_score=a,
            )
        manifest = manifest.with_results(results, model="demo", model_version="1")
    return buf.getvalue(), manifest


def scored_ring(
    ring_dir: object,
    model_path: object,
    values_per_window: Sequence[Sequence[int]],
    t0: float = 1_790_000_000.0,
    source: str = "cam1",
    archive_format: str = "zip",
    device: str = "edge-1",
) -> list[object]:
    """Run real windows through the live pipeline (packer + score_window) into a ring.

    Each window holds flat grey JPEGs of the given values; returns the live outcomes.
    """
    from pathlib import Path

    from cdml_edge.model.runner import ModelOverrides, load_runners
    from cdml_edge.store.retention import RetentionRing
    from cdml_edge.window.items import Item, Window
    from cdml_edge.window.pack import pack_window
    from cdml_edge.window.score import score_window
    from helpers.agent_runs import jpeg

    runners = load_runners({"image": (Path(str(model_path)), ModelOverrides())}, warm_up=False)
    ring = RetentionRing(Path(str(ring_dir)), max_bytes=10**9, fsync=False)
    outcomes = []
    for w, values in enumerate(values_per_window):
        opened = t0 + 10 * w
        win = Window(window_id=f"{source}-w{w:03d}", source=source, opened_ts=opened)
        for i, v in enumerate(values):
            data = jpeg(v)
            name = f"frame_{w:03d}_{i:02d}_{v}.jpg"
            mtime_ns = int((opened + i * 0.1) * 1e9)
            win.items.append(
                Item(
                    source,
                    name,
                    "image",
                    mtime_ns / 1e9,
                    data,
                    item_id(source, name, len(data), mtime_ns),
                    None,
                    len(data),
                    mtime_ns,
                )
            )
        win.closed_ts = opened + 5
        packed = pack_window(
            win, device=device, modality="image", archive_format=archive_format, site="line-3"
        )
        outcome = score_window(packed.archive, runners, device=device, archive_name=packed.name)
        res = ring.store(packed.archive, outcome.manifest)
        assert res.stored, res
        outcomes.append(outcome)
    ring.close()
    return outcomes
