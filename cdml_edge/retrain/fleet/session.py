"""Where a fleet job runs: an existing Ray cluster, or a local Ray started for the job.

:func:`ray_session` joins ``address`` (``ray://…`` or ``host:port``) when one is given, or
starts a local Ray kept inside one temporary folder: its session files, sockets, spilled
objects and its authentication token (Ray would otherwise write ``~/.ray`` and
``/tmp/ray``), with the dashboard off, bound to 127.0.0.1 and an object store of at most
:data:`DEFAULT_OBJECT_STORE` (Ray's default takes 30 % of RAM). A Ray already initialised in
this process (a notebook, a test session) is used as it is and left running; an
``address`` it is not connected to is then an error rather than ignored.

Without the ``ray`` extra, :func:`require_ray` raises :class:`RayMissingError` saying how to
install it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from cdml_edge.retrain.errors import OptionError

INSTALL_HINT = "pip install 'cdml-edge[ray]'"
DEFAULT_OBJECT_STORE = 2 << 30  # bytes; never more than a fifth of the machine's memory
MIN_OBJECT_STORE = 96 << 20  # Ray refuses less than about 75 MiB
_TOKEN_ENV = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")


class RayMissingError(OptionError):
    """``--engine ray`` was asked for but Ray Data is not installed."""


def require_ray() -> None:
    """Raise :class:`RayMissingError` unless Ray Data and pyarrow can be imported."""
    try:
        import pyarrow  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise RayMissingError(
            f"--engine ray needs Ray Data ({exc.name or exc} is not installed): {INSTALL_HINT}"
        ) from None


@dataclass(frozen=True)
class RaySettings:
    """How to reach Ray: ``address`` of a cluster, or the size of a local one."""

    address: str | None = None
    num_cpus: int | None = None  # local Ray: default all cores
    object_store_bytes: int | None = None  # local Ray: default DEFAULT_OBJECT_STORE
    temp_dir: str | None = None  # local Ray: default a new folder in the system temp


def _object_store(requested: int | None) -> int:
    if requested is not None:
        return max(MIN_OBJECT_STORE, requested)
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        ram = 8 << 30
    return max(MIN_OBJECT_STORE, min(DEFAULT_OBJECT_STORE, ram // 5))


@contextlib.contextmanager
def ray_session(settings: RaySettings | None = None, quiet: bool = True) -> Iterator[None]:
    """Ray for the length of the ``with`` block (see the module docstring)."""
    require_ray()
    import ray

    s = settings or RaySettings()
    _quiet_ray_data(quiet)
    if ray.is_initialized():
        _check_same_cluster(s.address)
        yield
        return
    if s.address:
        ray.init(address=s.address, logging_level=logging.WARNING, log_to_driver=not quiet)
        try:
            yield
        finally:
            ray.shutdown()
        return
    with _local_ray(s, quiet):
        yield


class RayAddressError(OptionError):
    """``address`` names another cluster than the Ray already running in this process."""


def _check_same_cluster(address: str | None) -> None:
    """Refuse an ``address`` the Ray running in this process is not connected to."""
    import ray

    if not address or address == "auto":
        return
    running = ray.get_runtime_context().gcs_address
    if address.split("://", 1)[-1] != running:
        raise RayAddressError(
            f"--ray-address {address}: Ray already runs in this process, connected to "
            f"{running}; call ray.shutdown() first, or leave the address out to use it"
        )


@contextlib.contextmanager
def _local_ray(s: RaySettings, quiet: bool) -> Iterator[None]:
    import ray

    own_dir = s.temp_dir is None
    temp = s.temp_dir or tempfile.mkdtemp(prefix="cdml-ray-")
    saved = {k: os.environ.get(k) for k in _TOKEN_ENV}
    if not any(saved.values()):  # a token for this cluster only, not written to ~/.ray
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        # and say nothing about it: Ray warns that token authentication is on
        logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)
    try:
        ray.init(
            num_cpus=s.num_cpus,
            object_store_memory=_object_store(s.object_store_bytes),
            include_dashboard=False,
            _temp_dir=temp,
            _node_ip_address="127.0.0.1",
            logging_level=logging.WARNING,
            log_to_driver=not quiet,
        )
        yield
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if own_dir:
            shutil.rmtree(temp, ignore_errors=True)


def _quiet_ray_data(quiet: bool) -> None:
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = not quiet
    if quiet:
        logging.getLogger("ray.data").setLevel(logging.ERROR)


@dataclass(frozen=True)
class FleetTuning:
    """How a fleet job uses the cluster (the defaults fit a 2-CPU machine and a large one)."""

    actors: int | None = None  # replay actors; default one per actor_cpus of the cluster
    actor_cpus: float = 1.0  # a replay actor reads, decodes, scores and writes its windows
    read_cpus: float = 0.25  # read tasks of read_items / read_windows
    plan_cpus: float = 0.5  # export pass 1 (sidecars only: mostly waiting on I/O)
    plan_windows: int = 500  # windows per plan task (each task a worker to start)
    writer_cpus: float = 1.0  # export shard writers (compression)
    windows_per_batch: int = 1024  # replay: at most, per actor call and Parquet part
    batches_per_actor: int = 4  # replay: at least (when there are windows enough)
    task_bytes: int = 256 << 20  # archive bytes per read task (about)
    retries: int = 3  # a replay actor whose worker died is started again, its batch rerun


def cluster_cpus() -> float:
    """CPUs of the running Ray cluster."""
    import ray

    return float(ray.cluster_resources().get("CPU", 1.0))


__all__ = [
    "DEFAULT_OBJECT_STORE",
    "INSTALL_HINT",
    "FleetTuning",
    "RayMissingError",
    "RaySettings",
    "cluster_cpus",
    "ray_session",
    "require_ray",
]
