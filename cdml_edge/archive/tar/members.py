"""The member list of a tar header walk, and the columns an archive holds it in."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import zstandard

from cdml_edge.archive.errors import TooManyMembersError, TruncatedArchiveError
from cdml_edge.archive.names import normalize_member_name
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar.seekable import MemberIndex
from cdml_edge.archive.zstd_frames import zstd_error

Scan = Callable[[Callable[[tarfmt.TarMember], None], Callable[[str, str], None]], int]


def member_list(
    archive: str,
    scan: Scan,
    header: Callable[[], bytes] | None = None,
    *,
    max_members: int | None = None,
    counted: int = 0,
) -> tuple[list[tarfmt.TarMember], dict[str, str]]:
    """The members a header walk finds, and the entries it skipped (name -> reason).

    ``header``: the header of the zstd frame under way, for a zstd error to tell an
    unsupported frame from a corrupt one. ``max_members``: the walk stops at the first
    entry (member or skipped one) past it, ``counted`` entries being walked before.
    """
    members: list[tarfmt.TarMember] = []
    skipped: dict[str, str] = {}
    on_member, on_skip = members.append, skipped.__setitem__
    if max_members is not None:
        limit = EntryLimit(archive, max_members, counted)
        on_member, on_skip = limit.counting(on_member), limit.counting(on_skip)
    try:
        scan(on_member, on_skip)
    except EOFError:
        raise TruncatedArchiveError("tar stream ends inside a member", archive=archive) from None
    except zstandard.ZstdError as exc:
        raise zstd_error(exc, archive=archive, header=_header(header)) from exc
    return members, skipped


class EntryLimit:
    """Counts the entries a walk finds; the first past ``limit`` raises TooManyMembersError."""

    def __init__(self, archive: str, limit: int, counted: int = 0) -> None:
        self.archive, self.limit, self.count = archive, limit, counted
        self.check()

    def check(self) -> None:
        """Raise when the entries counted are more than the limit."""
        if self.count > self.limit:
            raise TooManyMembersError.of(self.archive, self.limit, f"more than {self.limit:,}")

    def counting(self, call: Callable[..., None]) -> Callable[..., None]:
        """``call``, counting each call against the limit first."""

        def counted(*args: object) -> None:
            self.count += 1
            self.check()
            call(*args)

        return counted


def _header(header: Callable[[], bytes] | None) -> bytes | None:
    """The frame header ``header`` gives; ``None`` when there is none or it cannot be read."""
    if header is None:
        return None
    try:
        return header()
    except (OSError, ValueError):
        return None


def served_links(
    members: list[tarfmt.TarMember], skipped: dict[str, str]
) -> list[tarfmt.TarMember]:
    """The members with each hard link served as the file of its target's name before it.

    As ``tar -x`` makes it (and tarfile's ``extractfile`` reads it): the link's name, its
    header, the target's data. A link whose target no file before it has goes to
    ``skipped``, saying so. ``members`` itself when it holds no link.
    """
    if all(m.link is None for m in members):
        return members
    last: dict[str, tarfmt.TarMember] = {}
    out: list[tarfmt.TarMember] = []
    for m in members:
        if m.link is not None:
            target = last.get(normalize_member_name(m.link))
            if target is None:
                why = tarfmt.skip_reason(tarfmt.HARD_LINK, m.link)
                skipped[m.name] = f"{why} (no file of that name before it)"
                continue
            m = dataclasses.replace(target, name=m.name, header_offset=m.header_offset)
        last[normalize_member_name(m.name)] = m
        out.append(m)
    return out


def columns(members: list[tarfmt.TarMember], skipped: dict[str, str] | None = None) -> MemberIndex:
    """The members as columns (:class:`~.seekable.MemberIndex`), hard links served.

    ``skipped``: where a link to no file goes (:func:`served_links`).
    """
    members = served_links(members, {} if skipped is None else skipped)
    return MemberIndex(
        [m.name for m in members],
        [m.header_offset for m in members],
        [m.data_offset for m in members],
        [m.size for m in members],
        [m.mtime for m in members],
        [None] * len(members),
        {i: m.refused for i, m in enumerate(members) if m.refused},
        {i: m.sparse for i, m in enumerate(members) if m.sparse is not None},
    )
