"""The one error every decoder raises."""

from __future__ import annotations

from cdml_edge.errors import CdmlError


class DecodeError(CdmlError, ValueError):
    """Bytes of ``member`` could not be decoded; ``reason`` says why.

    ``DecodeError(message)`` (one argument) is also accepted, so a DataLoader can re-raise
    it in the main process from a worker's formatted traceback (which names the member).
    """

    def __init__(self, member: str, reason: str | None = None) -> None:
        if reason is None:
            self.member, self.reason = "", member
            super().__init__(member)
            return
        self.member = member
        self.reason = reason
        super().__init__(f"{member or '<bytes>'}: {reason}")

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, ...]]:
        # picklable across processes, the one-argument form included
        one_arg = self.args == (self.reason,) and not self.member
        return (type(self), (self.reason,) if one_arg else (self.member, self.reason))
