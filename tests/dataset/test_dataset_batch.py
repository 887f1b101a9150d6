"""Image batches decoded into one buffer: ``image_dtype``, ``channels_last`` and ``collate``."""

from __future__ import annotations

import copy
import ctypes
import errno
import io
import mmap
import pickle
import platform
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.dataset_data import class_images, write
from torch.utils.data import DataLoader, default_collate

from cdml_edge import CDMLStreamDataset
from cdml_edge.data import Collated, collate
from cdml_edge.data import batch as batch_module
from cdml_edge.decode import decode_image
from cdml_edge.decode.native import helpers


@pytest.fixture(scope="module", params=["zip", "tar.zst"])
def pets(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("b") / f"pets.{request.param}", class_images(4))


def _ds(path: Path, **kw: object) -> CDMLStreamDataset:
    return CDMLStreamDataset(path, is_image=True, target_size=(20, 14), labels="folder", **kw)


def test_uint8_is_the_float_output_before_normalising(pets: Path) -> None:
    f32, u8 = _ds(pets), _ds(pets, image_dtype="uint8")
    for i in range(len(f32)):
        x, y = f32[i]
        xu, yu = u8[i]
        assert xu.dtype == torch.uint8 and xu.shape == x.shape == (3, 14, 20) and y == yu
        assert torch.equal(xu.float() / 255, x)  # the same division, bit for bit
        ref = decode_image(f32.read(i), target_size=(20, 14))
        assert torch.equal(xu, torch.from_numpy(ref).permute(2, 0, 1))


def test_channels_last(pets: Path) -> None:
    chw = _ds(pets, image_dtype="uint8")
    hwc = _ds(pets, image_dtype="uint8", channels_last=True)
    assert hwc[0][0].shape == (14, 20, 3)
    assert torch.equal(hwc[3][0].permute(2, 0, 1), chw[3][0])
    batch = hwc.__getitems__([0, 1, 2])
    assert batch[1][0].shape == (14, 20, 3) and batch[1][0].is_contiguous()


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize("workers", [0, 2])
def test_collate_gives_the_default_batches(pets: Path, dtype: str, workers: int) -> None:
    ds = _ds(pets, image_dtype=dtype)
    plain = list(DataLoader(ds, batch_size=5, num_workers=workers))
    ours = list(DataLoader(ds, batch_size=5, num_workers=workers, collate_fn=collate))
    assert len(plain) == len(ours) == 3
    for (x, y), (xo, yo) in zip(plain, ours, strict=True):
        assert xo.dtype == x.dtype and torch.equal(x, xo) and torch.equal(y, yo)
    singles = torch.stack([ds[i][0] for i in range(5)])
    assert torch.equal(ours[0][0], singles)


def test_getitems_hands_over_one_buffer(pets: Path) -> None:
    ds = _ds(pets, image_dtype="uint8")
    batch = ds.__getitems__([4, 0, 7])
    assert isinstance(batch, Collated) and batch.images.shape == (3, 3, 14, 20)
    x, y = collate(batch)
    assert x is batch.images  # no copy
    assert y.tolist() == [ds.targets[i] for i in (4, 0, 7)]
    for k, (xi, _) in enumerate(batch):
        assert xi.data_ptr() == x[k].data_ptr()
    unlabelled = CDMLStreamDataset(pets, is_image=True, target_size=8).__getitems__([1, 2])
    assert collate(unlabelled) is unlabelled.images


def test_transform_and_no_target_size_keep_items(pets: Path) -> None:
    ds = CDMLStreamDataset(pets, is_image=True, image_dtype="uint8")
    items = ds.__getitems__([0, 1])
    assert not isinstance(items, Collated) and items[0].dtype == torch.uint8
    tf = CDMLStreamDataset(pets, is_image=True, target_size=8, transform=np.mean)
    assert not isinstance(tf.__getitems__([0, 1]), Collated)


def test_bad_image_dtype(pets: Path) -> None:
    with pytest.raises(ValueError, match="image_dtype"):
        CDMLStreamDataset(pets, is_image=True, image_dtype="float16")  # type: ignore[arg-type]


def _shared(shape: tuple[int, ...]) -> torch.Tensor:
    elem = torch.empty(0, dtype=torch.uint8)
    storage = elem._typed_storage()._new_shared(int(np.prod(shape)), device=elem.device)
    return elem.new(storage).resize_(shape)


def test_prefault_keeps_what_is_written() -> None:
    images = _shared((3, 5000))
    release = tuple(int(v) for v in re.findall(r"\d+", platform.release())[:2])
    linux_5_14 = sys.platform.startswith("linux") and release >= (5, 14)
    assert batch_module.prefault(images) == linux_5_14  # in one call where the kernel can
    values = torch.arange(15000, dtype=torch.int64).reshape(3, 5000).remainder(251)
    images.copy_(values)
    assert torch.equal(images.long(), values)
    assert not batch_module.prefault(torch.empty(0))  # nothing to fault in


def test_prefault_falls_back_where_madvise_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_module, "_MADVISE", None)  # not Linux, or no madvise
    images = _shared((4, 4096))
    assert not batch_module.prefault(images)
    images.fill_(7)
    assert int(images.sum()) == 7 * 4 * 4096


def test_prefault_stops_asking_a_kernel_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def old_kernel(addr: int, length: int, advice: int) -> int:
        calls.append((addr, length, advice))
        ctypes.set_errno(errno.EINVAL)  # before Linux 5.14: unknown advice
        return -1

    monkeypatch.setattr(batch_module, "_MADVISE", old_kernel)
    images = _shared((2, 3000))
    assert not batch_module.prefault(images)
    ((addr, length, advice),) = calls
    assert advice == 23 and addr % mmap.PAGESIZE == 0
    assert addr <= images.data_ptr() and addr + length == images.data_ptr() + 6000
    assert batch_module._MADVISE is None  # not asked again
    assert not batch_module.prefault(images) and len(calls) == 1


def test_reused_batch_buffers_keep_their_contract(
    pets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N = 3 with one worker (prefetch_factor 2): each batch intact until the next is taken.

    One kept longer is overwritten by the worker's batch 3 later (the documented contract);
    clone() keeps it.
    """
    ref = list(DataLoader(_ds(pets, image_dtype="uint8"), batch_size=2, collate_fn=collate))
    monkeypatch.setattr(batch_module, "_handed_over", False)  # the ring from the first batch
    ds = _ds(pets, image_dtype="uint8", reuse_batch_buffers=3)
    loader = DataLoader(ds, batch_size=2, num_workers=1, prefetch_factor=2, collate_fn=collate)
    kept, cloned = [], []
    for k, (x, y) in enumerate(loader):
        assert torch.equal(x, ref[k][0]) and torch.equal(y, ref[k][1])  # intact when taken
        kept.append(x)
        cloned.append(x.clone())
    assert len(kept) == len(ref) == 6
    assert all(torch.equal(c, r[0]) for c, r in zip(cloned, ref, strict=True))
    for k in range(3):  # a ring of 3 buffers: batches 0-2 now hold batches 3-5
        assert torch.equal(kept[k], ref[k + 3][0]) and not torch.equal(kept[k], ref[k][0])
        assert kept[k].data_ptr() == kept[k + 3].data_ptr()  # one mapping of one buffer
    assert all(torch.equal(kept[k], ref[k][0]) for k in (3, 4, 5))


def test_fresh_batch_buffers_by_default(pets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept batches stay intact without the ring, and with it under the default collate."""
    monkeypatch.setattr(batch_module, "_handed_over", True)
    ds = _ds(pets, image_dtype="uint8")
    ref = [x for x, _ in DataLoader(ds, batch_size=2, collate_fn=collate)]
    ring = _ds(pets, image_dtype="uint8", reuse_batch_buffers=3)
    for d, fn in ((ds, collate), (ds, None), (ring, None)):
        kept = [x for x, _ in DataLoader(d, batch_size=2, num_workers=1, collate_fn=fn)]
        assert len(kept) == 6 and all(torch.equal(a, b) for a, b in zip(kept, ref, strict=True))


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_reuse_batch_buffers(pets: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="reuse_batch_buffers"):
        _ds(pets, reuse_batch_buffers=bad)


@pytest.mark.parametrize("native", ["1", "0"], ids=["C helper", "NumPy"])
@pytest.mark.parametrize("shape", [(224, 224, 3), (128, 130, 3), (64, 64, 3)])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_channel_planes_are_the_transposed_image(
    shape: tuple[int, ...], dtype: str, native: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large images are split into planes (cv2.split), small ones transposed: same values.

    Float32 is ``x / 255`` bit for bit, scaled by the C helper or by NumPy.
    """
    monkeypatch.setenv("CDML_EDGE_NATIVE", native)
    assert (helpers() is not None) == (native == "1")  # built by the install
    rgb = np.random.default_rng(3).integers(0, 256, shape, dtype=np.uint8)
    rgb.reshape(-1)[:256] = np.arange(256)  # every value at least once
    ref = rgb.transpose(2, 0, 1)
    if dtype == "float32":
        ref = rgb.astype(np.float32).transpose(2, 0, 1) / np.float32(255)
    for channels_last, want in ((False, ref), (True, ref.transpose(1, 2, 0))):
        slots = np.zeros((3, *want.shape), ref.dtype)
        strided = np.zeros((*want.shape[:2], 2 * want.shape[2]), ref.dtype)[:, :, ::2]
        for dst in (slots[1], strided):
            batch_module._write(dst, rgb, dtype, channels_last)  # type: ignore[arg-type]
            assert np.array_equal(dst, want)
        assert not slots[0].any() and not slots[2].any()


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_the_default_collate_takes_the_buffer_without_a_copy(pets: Path, dtype: str) -> None:
    """A DataLoader without ``collate_fn`` gets the batch buffer itself, as ``collate``."""
    ds = _ds(pets, image_dtype=dtype)
    batch = ds.__getitems__([4, 0, 7])
    x, y = default_collate(batch)
    assert type(x) is torch.Tensor and x.data_ptr() == batch.images.data_ptr()
    assert x.shape == batch.images.shape and torch.equal(x, batch.images)
    assert y.tolist() == [ds.targets[i] for i in (4, 0, 7)]
    unlabelled = CDMLStreamDataset(pets, is_image=True, target_size=8).__getitems__([1, 2])
    alone = default_collate(unlabelled)
    assert type(alone) is torch.Tensor and alone.data_ptr() == unlabelled.images.data_ptr()


def test_the_default_collate_copies_what_is_not_one_whole_batch(pets: Path) -> None:
    """Items reordered, a part of a batch, or two batches mixed: stacked, values intact."""
    ds = _ds(pets, image_dtype="uint8")
    one = [x for x, _ in ds.__getitems__([0, 1, 2])]
    two = [x for x, _ in ds.__getitems__([3, 4])]
    for items in (one[::-1], one[:2], one[1:], [one[0], two[1], one[2]], one + two):
        out = default_collate(items)
        ref = torch.stack([t.clone() for t in items])
        assert type(out) is torch.Tensor and torch.equal(out, ref)
        assert out.data_ptr() != one[0].data_ptr()  # a copy: the batch's buffer is untouched


def test_batch_items_behave_as_plain_tensors(pets: Path) -> None:
    """What is computed from an item is a plain tensor."""
    x = _ds(pets).__getitems__([2, 5])[1][0]
    assert isinstance(x, torch.Tensor)
    for out in (x * 2, x.double(), x[0], x.view(-1), torch.stack([x, x]), x.clone()):
        assert type(out) is torch.Tensor


def test_no_ring_in_the_main_process(pets: Path) -> None:
    """``num_workers=0``: every batch is a new tensor, also with ``reuse_batch_buffers``.

    A ring in the process would be shared by every dataset and loader there: a validation
    loop would overwrite the batch a training loop still holds.
    """
    train = _ds(pets, image_dtype="uint8", reuse_batch_buffers=3)
    val = _ds(pets, image_dtype="uint8", reuse_batch_buffers=3)
    x, _ = next(iter(DataLoader(train, batch_size=2, collate_fn=collate)))
    keep = x.clone()
    held = [b for b, _ in DataLoader(val, batch_size=2, collate_fn=collate)]
    assert torch.equal(x, keep) and len({b.data_ptr() for b in held}) == len(held)


def test_an_item_deep_copies_and_saves_as_a_plain_tensor(pets: Path) -> None:
    x = _ds(pets).__getitems__([0, 1])[0][0]
    copied = copy.deepcopy(x)
    assert type(copied) is torch.Tensor and torch.equal(copied, x)
    assert copied.data_ptr() != x.data_ptr()
    f = io.BytesIO()
    torch.save([x], f)
    f.seek(0)
    (loaded,) = torch.load(f)  # weights_only=True, the default
    assert type(loaded) is torch.Tensor and torch.equal(loaded, x)
    back = pickle.loads(pickle.dumps(x))
    assert type(back) is torch.Tensor and torch.equal(back, x)


def test_a_batch_is_handed_over_once(pets: Path) -> None:
    """A second collate of the same items is a copy: two results never share memory."""
    batch = _ds(pets, image_dtype="uint8").__getitems__([0, 1, 2])
    first, _ = default_collate(batch)
    second, _ = default_collate(batch)
    assert first.data_ptr() == batch.images.data_ptr() != second.data_ptr()
    ref = second.clone()
    first.zero_()
    assert torch.equal(second, ref)


def test_items_that_need_grad_are_stacked(pets: Path) -> None:
    items = [x.requires_grad_() for x, _ in _ds(pets).__getitems__([0, 1])]
    out = default_collate(items)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    assert all(torch.equal(t.grad, torch.ones_like(t)) for t in items)


def test_items_turned_in_place_are_stacked(pets: Path) -> None:
    """An item transposed in place (still of its batch, same offset): stacked as it reads."""
    batch = CDMLStreamDataset(pets, is_image=True, target_size=16).__getitems__([0, 5, 9])
    items = list(batch)
    items[1].transpose_(1, 2)
    out = default_collate(items)
    assert torch.equal(out, torch.stack([t.as_subclass(torch.Tensor) for t in items]))


def test_collate_then_the_default_collate_share_no_memory(pets: Path) -> None:
    batch = _ds(pets, image_dtype="uint8").__getitems__([0, 1, 2])
    first = collate(batch)[0]
    second = default_collate(batch)[0]
    assert first.data_ptr() == batch.images.data_ptr() != second.data_ptr()
    alone = CDMLStreamDataset(pets, is_image=True, target_size=8).__getitems__([1, 2])
    assert collate(alone).data_ptr() != default_collate(alone).data_ptr()


def test_a_slot_of_another_shape_is_refused_not_overrun() -> None:
    """The C scaling writes as many values as the image holds: a smaller slot never gets it."""
    rgb = np.full((8, 8, 3), 255, np.uint8)
    small = np.zeros((2, 8, 8, 2), np.float32)
    with pytest.raises(ValueError):
        batch_module._write(small[0], rgb, "float32", channels_last=True)  # type: ignore[arg-type]
    assert not small[1].any()
    with pytest.raises(ValueError):
        batch_module._scaled_into(small[0], rgb)
    assert not small[1].any()
