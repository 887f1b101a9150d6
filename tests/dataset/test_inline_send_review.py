"""A review of the first version of labels sent by value: what the default collate must keep.

That version (e541b9c) made a batch's items a tuple subclass, so that the default collate
marked their labels, and sent a marked tensor by value whatever happened to it after. Each
case here failed on it and passed before it. Now only ``collate`` marks its labels and a
marked tensor that no longer qualifies goes PyTorch's way; the items are plain tuples.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree
from torch.utils.data import DataLoader, default_collate
from torch.utils.data._utils.collate import default_collate_fn_map

from cdml_edge import CDMLStreamDataset

pytestmark = pytest.mark.usefixtures("collect_after")

NAMES = ["cat", "dog", "eel"]


def _name(y: int) -> str:
    return NAMES[y]


def _name_bytes(y: int) -> bytes:
    return NAMES[y].encode()


def _half(y: int) -> float:
    return y + 0.5


def _ds(pets: Path, **kw: Any) -> CDMLStreamDataset:
    return CDMLStreamDataset(pets, is_image=True, target_size=16, labels="folder", **kw)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("to_label", [_name, _name_bytes], ids=["str", "bytes"])
def test_string_labels_collate_to_a_tuple_as_the_default_collate_gives(
    pool_pets: Path, num_workers: int, to_label: Any
) -> None:
    """String or bytes labels come as a tuple, as the default collate gives.

    String (or bytes) labels: the default collate of ``(image, str)`` tuples gives the
    labels as a tuple; ``_collate_pairs`` must give the same, not a list.
    """
    ds = _ds(pool_pets, target_transform=to_label)
    loader = DataLoader(ds, batch_size=5, num_workers=num_workers, timeout=60 if num_workers else 0)
    for k, (_, labels) in enumerate(loader):
        items = [ds[i] for i in range(5 * k, min(5 * k + 5, len(ds)))]
        want = default_collate([(x, y) for x, y in items])[1]
        assert type(want) is tuple
        assert type(labels) is tuple and labels == want


def test_pytree_flattens_a_batch_item_as_a_tuple(pool_pets: Path) -> None:
    """PyTorch's pytree sees a batch item as an ``(image, target)`` tuple node.

    ``torch.utils._pytree`` (``tree_map``/``tree_flatten``, as used to move or cast a batch)
    must see each item as an ``(image, target)`` tuple node, not as one opaque leaf.
    """
    ds = _ds(pool_pets)
    items = ds.__getitems__([0, 5])
    leaves, _ = pytree.tree_flatten(list(items))
    assert len(leaves) == 4  # two images, two targets
    cast = pytree.tree_map(lambda t: t.double() if isinstance(t, torch.Tensor) else t, list(items))
    assert default_collate(cast)[0].dtype == torch.float64


def _item_types(batch: Any) -> list[bool]:
    return [type(item) is tuple for item in batch]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_custom_collate_fn_gets_plain_tuples(pool_pets: Path, num_workers: int) -> None:
    """A custom collate_fn gets items whose type is ``tuple``.

    docs/dataset.md: the items are "plain ``(image, target)`` tuples to any other collate
    function"; a collate_fn checking ``type(item) is tuple`` (as it could before) must still
    see tuples.
    """
    loader = DataLoader(
        _ds(pool_pets),
        batch_size=5,
        num_workers=num_workers,
        collate_fn=_item_types,
        timeout=60 if num_workers else 0,
    )
    assert all(all(batch) for batch in loader)


def test_a_tuple_collate_registered_in_default_collate_fn_map_still_applies(
    pool_pets: Path,
) -> None:
    """A user's ``tuple`` handler in ``default_collate_fn_map`` still applies.

    A user's handler for ``tuple`` in PyTorch's ``default_collate_fn_map`` (PyTorch's
    documented way to extend the default collate) must still be what collates the batch's
    ``(image, target)`` items; ``ItemPair``'s own entry must not bypass it.
    """

    def user_tuples(batch: Any, *, collate_fn_map: Any = None) -> str:
        return "user handler"

    default_collate_fn_map[tuple] = user_tuples
    try:
        got = list(DataLoader(_ds(pool_pets), batch_size=5))
    finally:
        del default_collate_fn_map[tuple]
    assert got == ["user handler"] * 3


def _labels_and_view(batch: Any) -> Any:
    images, labels = default_collate(batch)
    return images, labels, labels[:2]


def test_labels_and_a_view_of_them_still_share_memory_after_a_worker(pool_pets: Path) -> None:
    """Labels and a view of them share memory after a worker.

    A collate_fn returning the labels and a view of them: in the main process they share
    memory, as any tensor and its view sent from a worker do (and did before).
    """
    loader = DataLoader(
        _ds(pool_pets), batch_size=5, num_workers=2, collate_fn=_labels_and_view, timeout=60
    )
    for _, labels, view in loader:
        labels[0] = 99
        assert view[0].item() == 99


def _label_type(batch: Any) -> Any:
    _, labels = default_collate(batch)
    return type(labels) is torch.Tensor


def test_a_custom_collate_fn_in_a_worker_gets_plain_label_tensors(pool_pets: Path) -> None:
    """Labels from ``default_collate`` in a worker are plain tensors.

    ``default_collate`` called by a user's collate_fn inside a worker returns the labels
    as a plain ``torch.Tensor`` (as in the main process, and as before), not ``InlineTensor``.
    """
    loader = DataLoader(
        _ds(pool_pets), batch_size=5, num_workers=2, collate_fn=_label_type, timeout=60
    )
    assert list(loader) == [True, True, True]


def _labels_needing_grad(batch: Any) -> Any:
    images, labels = default_collate(batch)
    return images, labels.requires_grad_()


def test_labels_made_to_require_grad_in_a_worker_still_arrive(pool_pets: Path) -> None:
    """Labels made to require grad in a worker still arrive.

    Float labels a collate_fn marks ``requires_grad_()`` in a worker (a leaf tensor, which
    PyTorch sends between processes) arrive in the main process. On e541b9c the send fails
    in the queue's feeder thread (``numpy()`` of a tensor that requires grad), nothing is
    sent, and the DataLoader waits forever (here: until its timeout).
    """
    loader = DataLoader(
        _ds(pool_pets, target_transform=_half),
        batch_size=5,
        num_workers=2,
        collate_fn=_labels_needing_grad,
        timeout=30,
    )
    got = [labels for _, labels in loader]
    assert [t.tolist() for t in got] == [
        [0.5] * 4 + [1.5],
        [1.5] * 3 + [2.5] * 2,
        [2.5] * 2,
    ]
    assert all(t.requires_grad for t in got)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_saved_batch_items_load_with_torch_load_defaults(pool_pets: Path, num_workers: int) -> None:
    """Saved raw batch items load with ``torch.load``'s defaults.

    A batch's raw items (``collate_fn=list``) saved with ``torch.save`` load again with
    ``torch.load``'s defaults (``weights_only=True`` since PyTorch 2.6), as plain tuples of
    tensors and ints did before; an ``ItemPair`` global is refused by that unpickler.
    """
    loader = DataLoader(
        _ds(pool_pets),
        batch_size=5,
        num_workers=num_workers,
        collate_fn=list,
        timeout=60 if num_workers else 0,
    )
    for batch in loader:
        buf = io.BytesIO()
        torch.save(batch, buf)
        buf.seek(0)
        got = torch.load(buf)
        assert [type(p) for p in got] == [tuple] * len(batch)
        assert all(
            torch.equal(g[0], b[0]) and g[1] == b[1] for g, b in zip(got, batch, strict=True)
        )
