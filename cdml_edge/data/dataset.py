"""``CDMLStreamDataset``: a map-style PyTorch dataset read straight out of an archive.

The archive (ZIP, seekable tar.zst, ``s3://``) is opened once, when the dataset is built.
A DataLoader worker gets the parent's parsed index and no more: a forked worker notices
the process id changed and takes a :meth:`~cdml_edge.archive.Archive.clone` (own file
handle, own decompressor state), a spawned one unpickles the archive with its index as
compact arrays. Neither fetches nor parses the index again. Pickling carries the resolved
member list and labels too, never the cache.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import os
import posixpath
import threading
from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import Dataset

from cdml_edge.archive.names import normalize_member_name
from cdml_edge.data.batch import (
    ImageDtype,
    check_image_dtype,
    check_reuse,
    fill_images,
    to_sample,
)
from cdml_edge.data.cache import ByteLRU, CacheInfo
from cdml_edge.data.labels import LabelError, Labels, LabelSource, resolve_labels
from cdml_edge.data.members import is_hidden, visible, with_modality
from cdml_edge.data.samples import SAMPLES, fit_length, pad_batch
from cdml_edge.decode import (
    DECODERS,
    DecodeError,
    check_modality,
    modality_for,
    normalize_size,
)
from cdml_edge.decode.image import TargetSize
from cdml_edge.decode.orientation import Orientation, check_orientation
from cdml_edge.errors import CdmlError

ArchivePath = str | os.PathLike[str] | bytes
Include = str | Sequence[str] | Callable[[str], bool] | None


ARENA_BYTES = 64 << 20
"""Bound of each thread's batch arena (used when ``cache_size_mb=0``); a larger batch is read
into fresh ``bytes``."""


class DatasetError(CdmlError, ValueError):
    """A dataset that cannot be built: the archive holds no member to load; names the archive."""


class CDMLStreamDataset(Dataset[Any]):
    """Random access to the members of an archive as PyTorch samples.

    Args:
        path: archive path (``str`` / ``PathLike``), ``s3://bucket/key``, or archive bytes.
        is_image: shorthand for ``modality="image"``.
        transform: applied to the decoded sample (images: uint8 ``H×W×3`` RGB ``ndarray``).
        cache_size_mb: per-process LRU of raw member bytes, bounded by real bytes; 0 disables
            it, and batches of decoded items are then read into a reused arena.
        target_size: images are resized to it (``int`` square or ``(width, height)``).
        modality: ``image`` | ``audio`` | ``csv`` | ``timeseries`` | ``json`` | ``text`` |
            ``binary``; ``None`` (default) yields raw bytes. Only members of that modality
            (by extension) are kept unless ``include`` picks members explicitly.
        labels: ``"folder"``, a callable ``name -> label``, a mapping, or the name of a
            ``.csv``/``.json`` member holding ``name,label`` pairs. Items become ``(x, y)``.
        include: glob pattern(s) or predicate selecting members (names in normal form:
            ``cat/1.jpg`` also for a member stored as ``./cat/1.jpg``).
        fixed_length: pad/trim audio frames (or samples), CSV/time-series rows to this
            length. Without it, each DataLoader batch (``__getitems__``) of unequal clips or
            tables is zero-padded to its longest item, so the default collate stacks it;
            ``ds[i]`` is always the exact item.
        classes: the class list that string labels index into, e.g. the training set's
            ``classes`` for its validation set (default: the sorted labels found here);
            a label outside it raises :class:`~cdml_edge.data.labels.LabelError`.
        orientation: ``"exif"`` (default) turns JPEGs as their EXIF orientation says, as
            viewers show them; ``"raw"`` keeps the stored pixels, as PIL and torchvision
            read them. The same for every JPEG backend and the reduced-scale path.
        image_dtype: ``"float32"`` (default: values in [0, 1]) or ``"uint8"`` (0-255, the
            decoded values: normalise on the device); images without a ``transform``.
        channels_last: images as ``H×W×3`` (batches ``B×H×W×3``) instead of ``3×H×W``.
        seekable_cache: a tar.zst that is one zstd frame (or a few) is converted once into a
            seekable copy in this folder (``True``: the default folder, see
            :mod:`cdml_edge.archive.seekable_cache`; ``False``: read it as it is).
        reuse_batch_buffers: 0 (default) or N, opt-in, for ``collate_fn=collate`` in
            DataLoader workers: each worker reuses a ring of N shared batch tensors instead of
            a fresh one per batch (no new shared pages to fault in). A batch stays valid until
            ``N - prefetch_factor`` more batches have been taken from the loader (with the
            default ``in_order=True``: ``(N - prefetch_factor) * num_workers``); with
            ``N = prefetch_factor + 1`` (3 by default), until the next batch is taken.
            ``clone()`` a batch to keep it longer. N must exceed ``prefetch_factor``. With
            ``num_workers=0`` it does nothing. The default needs no such contract: buffers
            are used again only once no tensor holds them (:mod:`cdml_edge.data.batch_pool`).

    With ``target_size`` and no ``transform``, a DataLoader batch of images is decoded into
    one tensor, which the default collate and ``collate_fn=cdml_edge.data.collate`` take
    without a copy; the tensor's buffer is used again for a later batch once nothing holds
    it any more.

    JSON items are the JSON text (``str``, re-serialised) so batches of records with
    different keys collate as lists; ``transform`` receives the parsed value.
    """

    def __init__(
        self,
        path: ArchivePath,
        is_image: bool = False,
        transform: Callable[[Any], Any] | None = None,
        cache_size_mb: float = 50,
        target_size: TargetSize = None,
        modality: str | None = None,
        labels: LabelSource = None,
        *,
        target_transform: Callable[[Any], Any] | None = None,
        include: Include = None,
        fixed_length: int | None = None,
        reduced_decode: bool = True,
        sample_rate: int = 16000,
        audio_mode: str = "mfcc",
        n_mfcc: int = 20,
        hop_length: int = 512,
        n_fft: int = 2048,
        archive_options: dict[str, Any] | None = None,
        classes: Sequence[str] | None = None,
        orientation: Orientation = "exif",
        image_dtype: ImageDtype = "float32",
        channels_last: bool = False,
        seekable_cache: bool | str | os.PathLike[str] = True,
        reuse_batch_buffers: int = 0,
    ) -> None:
        if is_image and modality not in (None, "image"):
            raise ValueError(f"is_image=True conflicts with modality={modality!r}")
        self.modality = check_modality(modality) if modality else ("image" if is_image else None)
        self.path: str | bytes = path if isinstance(path, bytes) else os.fspath(path)
        self.transform = transform
        self.target_transform = target_transform
        self.target_size = normalize_size(target_size)
        self.cache_size_mb = float(cache_size_mb)
        self.fixed_length = fixed_length
        self.reduced_decode = reduced_decode
        self.orientation = check_orientation(orientation)
        self.image_dtype = check_image_dtype(image_dtype)
        self.channels_last = bool(channels_last)
        self.reuse_batch_buffers = check_reuse(reuse_batch_buffers)
        self.seekable_cache = seekable_cache
        self.audio_options: dict[str, Any] = {
            "sample_rate": sample_rate,
            "mode": audio_mode,
            "n_mfcc": n_mfcc,
            "hop_length": hop_length,
            "n_fft": n_fft,
        }
        self.archive_options = dict(archive_options or {})
        self._archive: Any = None
        self._pid = -1
        self._cache = ByteLRU.from_mb(self.cache_size_mb)
        self._arenas = threading.local()

        resolved = self._members(include, labels, classes)
        self.names: list[str] = resolved.names
        self.targets: list[Any] | None = resolved.targets if labels is not None else None
        self.classes: list[str] = resolved.classes
        self.class_to_idx: dict[str, int] = resolved.class_to_idx

    # -- members ----------------------------------------------------------------------
    def _members(
        self, include: Include, labels: LabelSource, classes: Sequence[str] | None
    ) -> Labels:
        """The items (chosen, then labelled); errors name the archive."""
        archive = self._get_archive()
        all_names = archive.names()  # directories are left out
        names = self._select(all_names, include)
        if isinstance(labels, (str, os.PathLike)):
            spec = normalize_member_name(os.fspath(labels))
            if spec in archive:
                names = [n for n in names if n != spec]
        if not names:
            raise DatasetError(f"{self.archive_name}: {self._nothing_to_load(all_names)}")
        try:
            resolved = resolve_labels(labels, names, archive.read, all_names, classes)
        except LabelError as exc:
            raise LabelError(f"{self.archive_name}: {exc.where}", exc.reason) from None
        return resolved if resolved is not None else Labels(names, [])

    def _select(self, names: list[str], include: Include) -> list[str]:
        """Members that are items: by modality (extension), then by ``include``.

        With ``include`` given, members of an unknown extension also count as the chosen
        modality (``frame.raw`` as an image); members known to be another modality (a
        ``labels.csv`` beside the images) never do.
        """
        mod = self.modality
        if include is None:
            picked = visible(names)
            return picked if mod is None else with_modality(picked, (mod,))
        if callable(include):
            picked = [n for n in names if include(n)]
        else:
            patterns = [include] if isinstance(include, str) else list(include)
            patterns = [normalize_member_name(p) for p in patterns]
            picked = [
                n
                for n in names
                if any(
                    fnmatch.fnmatchcase(n, p) or fnmatch.fnmatchcase(posixpath.basename(n), p)
                    for p in patterns
                )
            ]
        if mod is None:
            return picked
        return with_modality(picked, (mod, "binary"))

    def _nothing_to_load(self, all_names: list[str]) -> str:
        """Why no member was chosen, with what the archive does hold."""
        held: dict[str, int] = {}
        for n in all_names:
            if not is_hidden(n):
                held[modality_for(n)] = held.get(modality_for(n), 0) + 1
        has = ", ".join(f"{k} {mod}" for mod, k in sorted(held.items()))
        has = f"{has} members" if has else "no members"
        what = f"no {self.modality} members" if self.modality else "no members"
        return f"{what} to load (the archive holds {has})"

    @property
    def archive_name(self) -> str:
        """The archive's path, or ``<memory>`` for one given as bytes."""
        return "<memory>" if isinstance(self.path, bytes) else str(self.path)

    @property
    def samples(self) -> list[tuple[str, Any]]:
        """``(member name, target)`` pairs, as ImageFolder's ``samples``."""
        targets = self.targets if self.targets is not None else [None] * len(self.names)
        return list(zip(self.names, targets, strict=True))

    def __len__(self) -> int:
        return len(self.names)

    # -- per-process archive and cache --------------------------------------------------
    def _get_archive(self) -> Any:
        pid = os.getpid()
        if self._archive is None or self._pid != pid:
            from cdml_edge.archive import open_archive

            first_open = self._pid == -1
            if self._archive is not None:  # forked: the parent's index, own reader state
                self._archive = self._archive.clone()
            else:
                opts = {"seekable_cache": self.seekable_cache, **self.archive_options}
                self._archive = open_archive(self.path, **opts)  # its index phase ended
            self._cache = ByteLRU.from_mb(self.cache_size_mb)  # each process starts empty
            self._pid = pid
            if not first_open:
                _tune_worker()
        return self._archive

    def _read_many(self, names: Sequence[str]) -> list[bytes]:
        archive = self._get_archive()  # resets the cache in a new process
        cache = self._cache
        out: list[bytes | None] = [cache.get(n) if cache.capacity else None for n in names]
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            fetched = archive.read_many([names[i] for i in missing])
            for i, data in zip(missing, fetched, strict=True):
                out[i] = data
                if cache.capacity:
                    cache.put(names[i], data)
        return [v for v in out if v is not None]

    def _read_batch(self, names: Sequence[str]) -> Sequence[bytes | memoryview]:
        """A batch's raw members.

        Without a cache to fill, decoded items are read into this thread's
        :class:`~cdml_edge.archive.Arena` (pages reused batch after batch, views used before
        the next batch); raw-bytes items and cached reads get ``bytes``.
        """
        if self._cache.capacity or self.modality is None:
            return self._read_many(names)
        archive = self._get_archive()
        arena = getattr(self._arenas, "arena", None)
        if arena is None:
            from cdml_edge.archive import Arena

            arena = self._arenas.arena = Arena(ARENA_BYTES)
        return archive.read_many(names, arena=arena)

    def read(self, index: int) -> bytes:
        """The raw bytes of item ``index`` (through the cache)."""
        return self._read_many([self.names[index]])[0]

    def cache_info(self) -> CacheInfo:
        """Hit/miss counters of this process's cache (each DataLoader worker has its own)."""
        return self._cache.info()

    # -- items --------------------------------------------------------------------------
    def decode(self, name: str, data: bytes | memoryview) -> Any:
        """Raw member bytes -> the sample (before labels)."""
        mod = self.modality
        tf = self.transform
        if mod is None:
            return tf(data) if tf else data
        value = self._value(name, data)
        if tf is not None:
            return tf(value)
        if mod == "image":
            return to_sample(value, self.image_dtype, self.channels_last)
        return SAMPLES[mod].default(value)

    def _value(self, name: str, data: bytes | memoryview) -> Any:
        """What ``transform`` receives: the decoded member, fit to ``fixed_length``."""
        mod = self.modality
        assert mod is not None
        kind = SAMPLES[mod]
        opts = {
            "target_size": self.target_size,
            "reduced": self.reduced_decode,
            "orientation": self.orientation,
        }
        try:
            decoded = DECODERS[mod](data, name, **opts, **self.audio_options)
        except DecodeError as exc:  # the member's name repeats archive after archive
            raise DecodeError(
                exc.member or name, f"{exc.reason} (in {self.archive_name})"
            ) from None
        value = kind.value(decoded)
        if kind.length_axis is not None and self.fixed_length is not None:
            value = fit_length(value, self.fixed_length, kind.length_axis)
        return value

    def _item(self, index: int, data: bytes | memoryview) -> Any:
        x = self.decode(self.names[index], data)
        if self.targets is None:
            return x
        y = self.targets[index]
        return x, (self.target_transform(y) if self.target_transform else y)

    def _index(self, index: int) -> int:
        """``index`` made non-negative; ``IndexError`` if it is out of range."""
        n = len(self.names)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {n} items")
        return i

    def __getitem__(self, index: int) -> Any:
        index = self._index(index)
        return self._item(index, self.read(index))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Batched fetch used by DataLoader: one ``read_many`` for all cache misses.

        Images of a fixed ``target_size`` without a ``transform`` are decoded into one batch
        tensor (:func:`cdml_edge.data.batch.fill_images`).
        """
        idx = [self._index(i) for i in indices]
        datas = self._read_batch([self.names[i] for i in idx])
        if self.modality == "image" and self.target_size and self.transform is None:
            batch = self._image_batch(idx, datas)
            del datas  # arena views: the next batch overwrites them
            return batch
        items = [self._item(i, d) for i, d in zip(idx, datas, strict=True)]
        del datas
        axis = SAMPLES[self.modality].length_axis if self.modality else None
        if axis is None or self.fixed_length is not None or self.transform is not None:
            return items
        return pad_batch(items, axis, labelled=self.targets is not None)

    def _image_batch(self, idx: list[int], datas: Sequence[bytes | memoryview]) -> list[Any]:
        """Images decoded straight into one batch buffer, with their targets."""
        assert self.target_size is not None
        names = self.names
        rgbs = [
            functools.partial(self._value, names[i], d) for i, d in zip(idx, datas, strict=True)
        ]
        targets = None
        if self.targets is not None:
            tt = self.target_transform
            targets = [tt(self.targets[i]) if tt else self.targets[i] for i in idx]
        return fill_images(
            rgbs,
            self.target_size,
            self.image_dtype,
            self.channels_last,
            targets,
            self.reuse_batch_buffers,
        )

    # -- distributed ----------------------------------------------------------------------
    def shard(self, rank: int, world_size: int, *, drop_last: bool = False) -> CDMLStreamDataset:
        """The ``rank``-th of ``world_size`` interleaved shards.

        As DistributedSampler splits without shuffling: padded by wrapping around to equal
        length (or ``drop_last``).
        """
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world={world_size}")
        n = len(self.names)
        if drop_last:
            order = list(range(n - n % world_size))
        else:
            total = -(-n // world_size) * world_size
            order = [i % n for i in range(total)]
        picked = order[rank::world_size]
        view = copy.copy(self)
        view.names = [self.names[i] for i in picked]
        view.targets = None if self.targets is None else [self.targets[i] for i in picked]
        return view

    # -- pickling -------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if isinstance(self.path, bytes):  # the bytes travel once, as the path
            state["_archive"] = None
        state["_pid"] = -2  # the receiving process starts its own archive
        state["_cache"] = None
        state["_arenas"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = ByteLRU.from_mb(self.cache_size_mb)
        self._arenas = threading.local()
        if self._archive is not None:  # unpickled with its parsed index: ready to read
            self._pid = os.getpid()

    def __repr__(self) -> str:
        mod = self.modality or "bytes"
        return f"CDMLStreamDataset({self.archive_name!r}, items={len(self)}, modality={mod})"


def _tune_worker() -> None:
    """Per-worker set-up hook.

    OpenCV's thread count is deliberately left alone: ``cv2.setNumThreads`` in a forked worker
    deadlocks when the parent process had already used OpenCV's thread pool (its worker
    threads do not survive ``fork``). Set ``OPENCV_FOR_THREADS_NUM=1`` in the environment
    before starting the training process to limit OpenCV threads instead.
    """
    return None
