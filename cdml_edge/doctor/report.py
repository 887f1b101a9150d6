"""What ``cdml-edge doctor`` prints: one line per check and a count, or the checks as JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass

from cdml_edge.doctor.check import Check


@dataclass(frozen=True)
class DoctorReport:
    """The checks of one doctor run.

    ``config_error``: the configuration did not load (then ``checks`` ends with the failed
    ``config`` check, after the ``unit environment`` one it was loaded with, if any).
    """

    checks: list[Check]
    config_error: bool = False

    @property
    def failed(self) -> bool:
        """Whether a check failed (warnings do not fail)."""
        return any(not c.ok for c in self.checks)

    def render(self, ascii_only: bool = False, as_json: bool = False) -> str:
        """The report as printed (without the final newline)."""
        if self.config_error:
            if as_json:
                return json.dumps([_brief(c) for c in self.checks])
            return "\n".join(c.line(ascii_only) for c in self.checks)
        if as_json:
            return json.dumps([c.__dict__ for c in self.checks], indent=2)
        lines = [c.line(ascii_only) for c in self.checks]
        real = [c for c in self.checks if not c.warn]
        failed = sum(not c.ok for c in real)
        warned = len(self.checks) - len(real)
        tail = f", {warned} warning{'s' if warned > 1 else ''}" if warned else ""
        lines.append(f"{len(real) - failed}/{len(real)} checks passed{tail}")
        return "\n".join(lines)


def _brief(check: Check) -> dict[str, object]:
    """A check of a report whose configuration did not load: ``warn`` only when set."""
    out: dict[str, object] = {"name": check.name, "ok": check.ok, "detail": check.detail}
    return {**out, "warn": True} if check.warn else out
