"""A configured source (``sources:`` entry) as a running folder watch or camera."""

from __future__ import annotations

from pathlib import Path

from cdml_edge.config import SourceConfig
from cdml_edge.intake.base import ErrorSink, ItemSink
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.intake.camera.source import CameraSource, CameraSpec, TransitionSink
from cdml_edge.intake.folder import FolderSource, FolderSpec
from cdml_edge.intake.kept import kept_path
from cdml_edge.modality import default_patterns
from cdml_edge.supervisor import Spawn, plain_thread

Source = FolderSource | CameraSource


def make_source(
    sc: SourceConfig,
    budget: ByteBudget,
    sink: ItemSink,
    on_error: ErrorSink,
    on_camera: TransitionSink | None = None,
    spawn: Spawn = plain_thread,
    state_dir: Path | None = None,
) -> Source:
    """The source of ``sc``, feeding ``sink`` within ``budget``.

    ``on_error`` for bad inputs, ``on_camera`` for a camera's state changes, ``spawn`` for a
    folder's long-lived thread (see :mod:`cdml_edge.supervisor`), ``state_dir`` for a
    folder's kept-file record (none: kept in memory).
    """
    if sc.kind == "camera":
        spec = CameraSpec(
            name=sc.name,
            url=str(sc.url),
            fps=sc.fps or 5.0,
            jpeg_quality=sc.jpeg_quality,
            loop=sc.loop,
            modality=sc.modality,
            backend=sc.backend,
            rtsp_transport=sc.rtsp_transport,
            open_timeout_s=sc.open_timeout,
            read_timeout_s=sc.read_timeout,
            reconnect_first_s=sc.reconnect_first,
            reconnect_max_s=sc.reconnect_max,
            unhealthy_after_s=sc.unhealthy_after,
        )
        return CameraSource(spec, budget, sink, on_error, on_camera)
    assert sc.path is not None
    fspec = FolderSpec(
        name=sc.name,
        path=sc.path,
        modality=sc.modality,
        patterns=tuple(sc.patterns) or default_patterns(sc.modality),
        stable_seconds=sc.stable_seconds,
        settle=sc.settle,
        polling=sc.polling,
        max_file_bytes=sc.window.max_bytes,
        follow_symlinks=sc.follow_symlinks,
        link_roots=tuple(sc.link_roots),
        kept_record=kept_path(state_dir, sc.name) if state_dir is not None else None,
        keep=sc.on_done == "keep",
    )
    return FolderSource(fspec, budget, sink, on_error, spawn=spawn)
