"""The one error every decoder raises."""

from __future__ import annotations


class DecodeError(ValueError):
    """Bytes of ``member`` could not be decoded; ``reason`` says why."""

    def __init__(self, member: str, reason: str) -> None:
        self.member = member
        self.reason = reason
        super().__init__(f"{member or '<bytes>'}: {reason}")

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, str]]:
        # keeps the error picklable across DataLoader worker processes
        return (DecodeError, (self.member, self.reason))
