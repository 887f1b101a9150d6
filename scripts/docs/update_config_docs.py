"""Rewrite the configuration reference in docs/config.md from the pydantic models."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from cdml_edge.config.reference import config_reference_markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config.md"
BLOCK = re.compile(r"(<!-- config-reference -->\n)(.*?)(<!-- /config-reference -->)", re.S)


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        print("docs/config.md has no <!-- config-reference --> block", file=sys.stderr)
        return 1
    new = BLOCK.sub(lambda m: m.group(1) + config_reference_markdown() + m.group(3), text)
    PAGE.write_text(new, encoding="utf-8")
    print("docs/config.md configuration reference updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
