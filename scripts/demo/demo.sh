#!/usr/bin/env bash
# `make demo`: generate demo inputs, run the agent against the embedded broker for a bounded
# time, print what a subscriber received.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PY:-.venv/bin/python}"
DEMO_DIR="${DEMO_DIR:-demo}"
"$PY" scripts/demo/make_demo_data.py --out "$DEMO_DIR"
# librosa compiles its numba kernels on first import in a fresh environment (about 30 s on
# two cores); do it once here, visibly, so the agent's own start-up is quick.
echo "preparing the audio decoder (numba kernels are compiled once, then cached) ..."
"$PY" - <<'PY'
import io

import numpy as np
import soundfile as sf

from cdml_edge.decode import decode_audio

buf = io.BytesIO()
sf.write(buf, np.zeros(16000, dtype=np.float32), 16000, format="WAV")
decode_audio(buf.getvalue(), member="warm-up.wav")
PY
"$PY" scripts/demo/demo_run.py --demo-dir "$DEMO_DIR" --duration "${DEMO_SECONDS:-12}"
