"""Who the doctor checks folders for: the calling process, or another account (``--user``).

Probing by writing a file only answers for the process that runs the doctor; run as root it
passes everywhere. For the service's own account the permission bits are evaluated instead:
owner, group (primary and supplementary) or other, with search permission on every ancestor.
POSIX ACLs and read-only mounts are not modelled (the unit's ``ReadWritePaths`` are checked
separately).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.errors import CdmlError

R, W, X = 4, 2, 1


class AccountError(CdmlError, ValueError):
    """``--user`` names no account on this machine."""


@dataclass(frozen=True)
class Account:
    """A user as the kernel sees it for permission checks."""

    name: str
    uid: int
    gids: frozenset[int]

    @classmethod
    def lookup(cls, name: str, extra_groups: tuple[str, ...] = ()) -> Account:
        """``name``'s uid and groups, plus those of ``extra_groups`` that exist.

        ``extra_groups`` are e.g. the unit's ``SupplementaryGroups=``.
        """
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise AccountError(f"--user: no account named {name!r}") from None
        gids = set(os.getgrouplist(name, pw.pw_gid))
        for g in extra_groups:
            try:
                gids.add(grp.getgrnam(g).gr_gid)
            except KeyError:
                continue
        return cls(name, pw.pw_uid, frozenset(gids))

    def allows(self, path: Path, want: int) -> bool:
        """True when this account has the ``want`` bits (R|W|X) on ``path`` itself."""
        if self.uid == 0:
            return True
        st = os.stat(path)
        if st.st_uid == self.uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid in self.gids:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        return bits & want == want

    def blocked_at(self, path: Path) -> Path | None:
        """The first ancestor of ``path`` this account cannot search (x bit), or None."""
        for parent in reversed(Path(os.path.abspath(path)).parents):
            if not self.allows(parent, X):
                return parent
        return None

    def dir_problem(self, path: Path, want: int) -> str | None:
        """None when ``path`` (an existing folder) grants ``want`` to this account; else why."""
        blocked = self.blocked_at(path)
        if blocked is not None:
            return f"{path}: {self.name} cannot enter {blocked}"
        if not stat.S_ISDIR(os.stat(path).st_mode):
            return f"{path} is not a folder"
        if not self.allows(path, want):
            need = "".join(c for c, b in (("r", R), ("w", W), ("x", X)) if want & b)
            return f"{path} is not {_verb(want)} by {self.name} (needs {need})"
        return None


def _verb(want: int) -> str:
    return "writable" if want & W else "readable"
