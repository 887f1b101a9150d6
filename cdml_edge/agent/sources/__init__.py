"""Where items come from: watched folders and cameras (which survive their camera)."""

from cdml_edge.agent.sources.base import (
    ErrorSink,
    FileTooLarge,
    IntakeFault,
    ItemSink,
    LinkRefused,
    NotRegularFile,
    SourceError,
    SourceStats,
    WatchLost,
)
from cdml_edge.agent.sources.camera import CameraSource, CameraSpec
from cdml_edge.agent.sources.camera_status import CameraSnapshot, CameraTransition
from cdml_edge.agent.sources.folder import FolderSource, FolderSpec, is_candidate

__all__ = [
    "CameraSnapshot",
    "CameraSource",
    "CameraSpec",
    "CameraTransition",
    "ErrorSink",
    "FileTooLarge",
    "FolderSource",
    "FolderSpec",
    "IntakeFault",
    "ItemSink",
    "LinkRefused",
    "NotRegularFile",
    "SourceError",
    "SourceStats",
    "WatchLost",
    "is_candidate",
]
