"""Rewrite the configuration reference in README.md from the pydantic models."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from cdml_edge.config.reference import config_reference_markdown

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- config-reference -->\n)(.*?)(<!-- /config-reference -->)", re.S)


def main() -> int:
    text = README.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        print("README.md has no <!-- config-reference --> block", file=sys.stderr)
        return 1
    new = BLOCK.sub(lambda m: m.group(1) + config_reference_markdown() + m.group(3), text)
    README.write_text(new, encoding="utf-8")
    print("README.md configuration reference updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
