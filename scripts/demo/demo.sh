#!/usr/bin/env bash
# `make demo`: generate demo inputs, run the agent against the embedded broker for a bounded
# time, print what a subscriber received.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PY:-.venv/bin/python}"
DEMO_DIR="${DEMO_DIR:-demo}"
"$PY" scripts/demo/make_demo_data.py --out "$DEMO_DIR"
"$PY" scripts/demo/demo_run.py --demo-dir "$DEMO_DIR" --duration "${DEMO_SECONDS:-12}"
