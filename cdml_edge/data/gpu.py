"""``GPULoader``: overlap host-to-device copies with compute.

Each batch is pinned and copied with ``non_blocking=True`` on a side CUDA stream while
the caller works on the previous batch; the compute stream waits on the copy only when
the batch is handed out. Without CUDA (or for a CPU device) batches pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor in nested tuples / lists / dicts / namedtuples."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(map_tensors(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(v, fn) for v in obj)
    if isinstance(obj, Mapping):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj


class GPULoader:
    """Wrap an iterable of batches (a DataLoader) and deliver them on ``device``.

    ``prefetch`` batches are copied ahead (default 1: the next batch moves while the
    current one is used). ``enabled`` is ``False`` when ``device`` is not a usable CUDA
    device; iteration then yields the loader's batches untouched.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: str | torch.device | None = None,
        *,
        pin_memory: bool = True,
        prefetch: int = 1,
    ) -> None:
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch}")
        self.loader = loader
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.enabled = self.device.type == "cuda" and torch.cuda.is_available()
        self.pin_memory = pin_memory
        self.prefetch = prefetch

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        if not self.enabled:
            yield from self.loader
            return
        yield from self._cuda_iter()

    def _copy(self, batch: Any, stream: torch.cuda.Stream) -> tuple[Any, torch.cuda.Event]:
        def move(t: torch.Tensor) -> torch.Tensor:
            if self.pin_memory and t.device.type == "cpu" and not t.is_pinned():
                t = t.pin_memory()
            return t.to(self.device, non_blocking=True)

        with torch.cuda.stream(stream):
            moved = map_tensors(batch, move)
            done = torch.cuda.Event()
            done.record(stream)
        return moved, done

    def _cuda_iter(self) -> Iterator[Any]:
        stream = torch.cuda.Stream(device=self.device)
        compute = torch.cuda.current_stream(self.device)
        pending: list[tuple[Any, torch.cuda.Event]] = []
        it = iter(self.loader)
        exhausted = False

        def fill() -> None:
            nonlocal exhausted
            while not exhausted and len(pending) < self.prefetch:
                try:
                    batch = next(it)
                except StopIteration:
                    exhausted = True
                    return
                pending.append(self._copy(batch, stream))

        fill()
        while pending:
            batch, done = pending.pop(0)
            compute.wait_event(done)

            def adopt(t: torch.Tensor) -> torch.Tensor:
                if t.device.type == "cuda":
                    t.record_stream(compute)  # memory made on the side stream, used here
                return t

            batch = map_tensors(batch, adopt)
            fill()  # start copying the next batch before handing this one out
            yield batch
