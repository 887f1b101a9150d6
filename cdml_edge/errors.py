"""The root of every error cdml-edge raises on purpose.

Each typed error (``ArchiveError``, ``ConfigError``, ``DecodeError``, ``ModelSpecError``, ...)
derives from :class:`CdmlError`, so a caller can catch everything the library reports about
bad input or a bad setup in one ``except`` while real bugs still surface as themselves.
Typed errors carry what they are about (file, member, field) as attributes and in the message.
"""

from __future__ import annotations


class CdmlError(Exception):
    """Base class of every typed cdml-edge error."""


__all__ = ["CdmlError"]
