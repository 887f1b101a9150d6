"""cdmltrain 1.x's live API: ``watch_and_pack`` and ``watch_in_memory`` over :class:`LiveWatch`.

Both block until ``duration`` seconds passed, ``stop`` (a :class:`threading.Event`) is set,
or Ctrl-C, and then return the finished watch (its ``stats``); with ``background=True``
they return the running watch at once (call ``.stop()`` on it). Either way the callback
runs on the watch's own thread, one batch (or file) at a time, in order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cdml_edge.intake.windower import WindowPolicy
from cdml_edge.live.batch import PackedBatch, pack_batch
from cdml_edge.live.settings import MiB, WatchSettings, data_type
from cdml_edge.live.watch import LiveWatch, callable_name
from cdml_edge.window.items import Window
from cdml_edge.window.pack import ARCHIVE_SUFFIX

log = logging.getLogger(__name__)

BatchCallback = Callable[[PackedBatch], Any]
FileCallback = Callable[..., Any]


def _launch(
    watch: LiveWatch, duration: float | None, stop: threading.Event | None, background: bool
) -> LiveWatch:
    if background:
        return watch.start()
    watch.run(duration, stop)
    return watch


def _check_batch_options(folder: Path, out: Path | None, archive_format: str) -> None:
    """``ValueError`` for options every batch would fail on, before anything starts.

    An unknown ``archive_format``; an ``output_folder`` that is the watched folder (each
    archive written there would be packed into the next batch, for ever).
    """
    if archive_format not in ARCHIVE_SUFFIX:
        choices = " or ".join(repr(f) for f in ARCHIVE_SUFFIX)
        raise ValueError(f"archive_format {archive_format!r}: choose {choices}")
    if out is not None and out.resolve() == folder.resolve():
        raise ValueError(
            f"output_folder {out} is the watched folder: each batch would be packed again "
            "into the next; give another folder (one inside it is fine)"
        )


def watch_and_pack(
    input_folder: str | Path,
    output_folder: str | Path | None = None,
    on_batch_ready: BatchCallback | None = None,
    interval_seconds: float = 10.0,
    auto_delete: bool = False,
    *,
    archive_format: str = "zip",
    max_files: int = 1000,
    max_bytes: int = 64 * MiB,
    patterns: Sequence[str] = ("*",),
    stable_seconds: float = 0.5,
    max_inflight_bytes: int = 256 * MiB,
    quarantine_dir: str | Path | None = None,
    device: str | None = None,
    duration: float | None = None,
    stop: threading.Event | None = None,
    background: bool = False,
) -> LiveWatch:
    """Watch ``input_folder``; pack the files that arrive into one archive per batch.

    ``on_batch_ready(batch)`` is called with each (:class:`PackedBatch`: the archive in memory,
    path-like to the file written in ``output_folder`` when one is given).

    A batch closes ``interval_seconds`` after its first file, at ``max_files`` or at
    ``max_bytes``. With ``auto_delete``, once the callback returned without error, the
    batch's input files (the versions that were read) and its written archive are deleted;
    when it raises, or returns only after ``stop()`` gave up on it, everything stays on
    disk. ``archive_format``: ``zip`` or ``tar.zst``. ``ValueError`` for another format,
    or an ``output_folder`` that is ``input_folder``.
    """
    out = Path(output_folder) if output_folder is not None else None
    _check_batch_options(Path(input_folder), out, archive_format)
    callback = on_batch_ready

    def handle(window: Window) -> Path | None:
        batch = pack_batch(window, archive_format, out, device)
        if callback is not None:
            callback(batch)
        return batch.path  # deleted by the watch with the inputs (auto_delete)

    settings = WatchSettings(
        folder=Path(input_folder),
        window=WindowPolicy(interval_seconds, max_files, max_bytes, close_when_idle=False),
        auto_delete=auto_delete,
        patterns=tuple(patterns),
        stable_seconds=stable_seconds,
        max_inflight_bytes=max_inflight_bytes,
        quarantine_dir=Path(quarantine_dir) if quarantine_dir is not None else None,
        name="batch",
    )
    name = callable_name(callback) if callback is not None else None
    return _launch(LiveWatch(settings, handle, name), duration, stop, background)


def watch_in_memory(
    folder: str | Path,
    callback: FileCallback,
    *,
    auto_delete: bool = False,
    with_data: bool = False,
    patterns: Sequence[str] = ("*",),
    stable_seconds: float = 0.5,
    max_file_bytes: int = 64 * MiB,
    max_inflight_bytes: int = 256 * MiB,
    quarantine_dir: str | Path | None = None,
    duration: float | None = None,
    stop: threading.Event | None = None,
    background: bool = False,
) -> LiveWatch:
    """Call ``callback(filepath, data_type)`` for each complete file as it arrives.

    With ``with_data`` the call is ``callback(filepath, data_type, data)``: the bytes already
    read.

    ``data_type`` is cdmltrain 1.x's name (:func:`~cdml_edge.live.settings.data_type`). The file
    stays on disk (and is not taken again unless it changes); with ``auto_delete`` it is
    deleted once the callback returned without error.
    """

    def handle(window: Window) -> None:  # returns no output to delete
        for it in window.items:
            args: tuple[Any, ...] = (str(it.path), data_type(it.name))
            callback(*args, it.data) if with_data else callback(*args)

    settings = WatchSettings(
        folder=Path(folder),
        window=WindowPolicy(
            seconds=1.0, max_items=1, max_bytes=max_file_bytes, close_when_idle=False
        ),
        auto_delete=auto_delete,
        patterns=tuple(patterns),
        stable_seconds=stable_seconds,
        max_inflight_bytes=max_inflight_bytes,
        quarantine_dir=Path(quarantine_dir) if quarantine_dir is not None else None,
        name="file",
    )
    return _launch(LiveWatch(settings, handle, callable_name(callback)), duration, stop, background)
