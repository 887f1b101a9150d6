"""A batch's labels leave a DataLoader worker inside the message, not through shared memory."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator
from multiprocessing import resource_sharer
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from cdml_edge import CDMLStreamDataset
from cdml_edge.data import collate
from cdml_edge.data.inline_send import INLINE_BYTES, InlineTensor, inline, rebuild

pytestmark = pytest.mark.usefixtures("collect_after")


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Descriptors this process fetched from another one (multiprocessing's resource sharer)."""
    got: list[int] = []
    real = resource_sharer.DupFd.detach

    def counting(self: Any) -> int:
        fd: int = real(self)
        got.append(fd)
        return fd

    monkeypatch.setattr(resource_sharer.DupFd, "detach", counting)
    yield got


def _loader(pets: Path, **kw: Any) -> DataLoader[Any]:
    ds = CDMLStreamDataset(pets, is_image=True, target_size=16, labels="folder")
    return DataLoader(ds, batch_size=4, num_workers=2, **kw)


def test_labels_come_by_value_and_the_images_as_one_descriptor(
    pool_pets: Path, fetched: list[int]
) -> None:
    loader = _loader(pool_pets, collate_fn=collate)
    inline_ds = CDMLStreamDataset(pool_pets, is_image=True, target_size=16, labels="folder")
    batches = list(loader)
    assert len(batches) == 3
    for k, (images, labels) in enumerate(batches):
        assert type(labels) is torch.Tensor and type(images) is torch.Tensor
        assert labels.dtype == torch.int64 and labels.shape == (4,)
        want = [inline_ds[i] for i in range(4 * k, 4 * k + 4)]
        assert labels.tolist() == [y for _, y in want]
        assert torch.equal(images, torch.stack([x for x, _ in want]))
        labels += 1  # the main process's own memory
    # one descriptor per batch, the images' buffer; the labels came in the message
    assert len(fetched) == len(batches)


def test_inline_marks_only_small_plain_tensors_in_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = torch.arange(8)
    assert inline(small) is small  # not in a worker: unchanged
    monkeypatch.setattr("cdml_edge.data.inline_send.in_worker", lambda: True)
    assert type(inline(small)) is InlineTensor
    big = torch.zeros(INLINE_BYTES // 8 + 1, dtype=torch.int64)
    grad = torch.zeros(3, requires_grad=True)
    strided = torch.arange(12).reshape(3, 4).t()
    half = torch.zeros(3, dtype=torch.bfloat16)
    for other in (big, grad, strided, half, [1, 2], 3):
        assert inline(other) is other


def test_an_inline_tensor_is_sent_by_value_and_arrives_plain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("cdml_edge.data.inline_send.in_worker", lambda: True)
    for value in (
        torch.tensor([3, 1, 2]),
        torch.tensor(7.5, dtype=torch.float64),
        torch.tensor([[True, False]]),
        torch.zeros(0, 2, dtype=torch.float16),
    ):
        sent = bytes(ForkingPickler.dumps(inline(value)))
        got = pickle.loads(sent)
        assert type(got) is torch.Tensor and got.dtype == value.dtype
        assert got.shape == value.shape and torch.equal(got, value)
        assert value.numpy().tobytes() in sent  # the values are in the message
    marked = inline(torch.tensor([1, 2]))
    for plain in (pickle.loads(pickle.dumps(marked)), copy.deepcopy(marked)):
        assert type(plain) is torch.Tensor and plain.tolist() == [1, 2]
    assert rebuild(b"\x01\x00", "<i2", (1,)).tolist() == [1]


def _labels_changed(batch: Any) -> Any:
    """``collate``, then its labels changed in place: made to need a gradient, or turned."""
    images, labels = collate(batch)
    assert type(labels) is InlineTensor  # marked as it was made
    if len(batch) == 4:
        return images, labels.requires_grad_()
    return images, labels.unsqueeze_(0).t_()


def _half(y: int) -> float:
    return y + 0.5


def test_labels_changed_after_collate_in_a_worker_arrive_as_pytorch_sends_them(
    pool_pets: Path,
) -> None:
    """A marked tensor that no longer qualifies as it leaves goes PyTorch's way.

    Sent by value, a tensor that needs a gradient failed in the queue's feeder thread and
    the loader waited for ever.
    """
    ds = CDMLStreamDataset(
        pool_pets, is_image=True, target_size=16, labels="folder", target_transform=_half
    )
    want = [y for _, y in (ds[i] for i in range(len(ds)))]
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=_labels_changed, timeout=30)
    got = [labels for _, labels in loader]
    assert all(t.requires_grad and t.dtype == torch.float64 for t in got)
    assert [v for t in got for v in t.tolist()] == want
    odd = list(DataLoader(ds, batch_size=5, num_workers=2, collate_fn=_labels_changed, timeout=30))
    assert [tuple(t.shape) for _, t in odd] == [(5, 1), (5, 1), (2, 1)]
    assert [v for _, t in odd for v in t.flatten().tolist()] == want


def test_a_tensor_numpy_refuses_goes_pytorchs_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever ``numpy()`` refuses as the tensor leaves: PyTorch's reduction, never a raise.

    A raise there happens in the queue's feeder thread, and the loader would wait for ever.
    """
    monkeypatch.setattr("cdml_edge.data.inline_send.in_worker", lambda: True)
    marked = inline(torch.tensor([4, 5, 6]))

    def refuse(self: torch.Tensor, *args: Any, **kw: Any) -> Any:
        raise RuntimeError("numpy() refused")

    monkeypatch.setattr(torch.Tensor, "numpy", refuse)
    sent = bytes(ForkingPickler.dumps(marked))
    monkeypatch.undo()
    assert b"cdml_edge.data.inline_send" not in sent  # not our rebuild
    got = pickle.loads(sent)
    assert type(got) is torch.Tensor and got.tolist() == [4, 5, 6]
