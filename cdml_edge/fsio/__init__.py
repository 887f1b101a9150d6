"""File-system I/O the appliance trusts: durable writes, safe names, failing disks.

Durable writes (``atomic``), names as the file system takes them (``names``), and the state
of a store whose disk fails (``faults``), what a file takes on the disk (``space``).
"""

from cdml_edge.fsio.atomic import (
    TMP_PREFIX,
    UMASK,
    atomic_write,
    atomic_writer,
    folder_mode,
    fsync_dir,
    make_folder,
    staged_path,
    umask_mode,
)
from cdml_edge.fsio.faults import FULL_ERRNOS, PROBE_BYTES, PROBE_MIN_S, DiskFaults, FaultHook
from cdml_edge.fsio.names import NAME_MAX, display_name, fit_name, log_name, unique_name
from cdml_edge.fsio.space import block_size, on_disk

__all__ = [
    "FULL_ERRNOS",
    "NAME_MAX",
    "PROBE_BYTES",
    "PROBE_MIN_S",
    "TMP_PREFIX",
    "UMASK",
    "DiskFaults",
    "FaultHook",
    "atomic_write",
    "atomic_writer",
    "block_size",
    "display_name",
    "fit_name",
    "folder_mode",
    "fsync_dir",
    "log_name",
    "make_folder",
    "on_disk",
    "staged_path",
    "umask_mode",
    "unique_name",
]
