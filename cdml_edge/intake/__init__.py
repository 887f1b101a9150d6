"""Where items come from: watched folders and cameras (which survive their camera)."""

from cdml_edge.intake.base import (
    ErrorSink,
    FileTooLarge,
    FileUnreadable,
    FolderReadable,
    FolderUnreadable,
    IntakeFault,
    ItemSink,
    LinkRefused,
    NotRegularFile,
    SourceError,
    SourceStats,
    SubfolderUnreadable,
    WatchLost,
)
from cdml_edge.intake.camera.source import CameraSource, CameraSpec
from cdml_edge.intake.camera.status import CameraSnapshot, CameraTransition
from cdml_edge.intake.folder import FolderSource, FolderSpec, is_candidate

__all__ = [
    "CameraSnapshot",
    "CameraSource",
    "CameraSpec",
    "CameraTransition",
    "ErrorSink",
    "FileTooLarge",
    "FileUnreadable",
    "FolderSource",
    "FolderReadable",
    "FolderSpec",
    "FolderUnreadable",
    "IntakeFault",
    "ItemSink",
    "LinkRefused",
    "NotRegularFile",
    "SourceError",
    "SourceStats",
    "SubfolderUnreadable",
    "WatchLost",
    "is_candidate",
]
