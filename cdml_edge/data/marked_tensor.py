"""A tensor subclass that only the pickler registered for it tells from a plain tensor."""

from __future__ import annotations

from typing import Any

import torch


class MarkedTensor(torch.Tensor):
    """A tensor marked for one purpose, and a plain tensor to everything else.

    What is computed from it is a plain ``torch.Tensor`` (no subclass dispatch), and
    ``pickle``, ``torch.save`` and ``deepcopy`` see a plain tensor. A subclass registers
    its own reduction with multiprocessing's ``ForkingPickler`` where it means to be seen.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        return self.as_subclass(torch.Tensor).__deepcopy__(memo)

    def __reduce_ex__(self, protocol: Any) -> Any:  # torch.save, pickle: a plain tensor
        return self.as_subclass(torch.Tensor).__reduce_ex__(protocol)
