"""Models the agent runs: ONNX sessions, their specs, input preparation and output heads."""
