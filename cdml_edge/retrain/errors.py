"""The errors of replay and training export (all :class:`~cdml_edge.errors.CdmlError`).

:class:`~cdml_edge.retrain.filters.FilterError` (a bad ``--filter`` or time) lives with the
filters it is about.
"""

from __future__ import annotations

from cdml_edge.errors import CdmlError


class ExportError(CdmlError):
    """An export that cannot be made; names the file or argument at fault."""


class OptionError(CdmlError):
    """An option of a replay or export run that cannot be used (a usage error)."""


class ReplayError(CdmlError):
    """A replay that cannot start: its windows or its models cannot be read."""


__all__ = ["ExportError", "OptionError", "ReplayError"]
