"""The window: items, archive and scoring, shared by the agent, the store and retrain.

Items and windows (``items``), ``manifest.json`` (``manifest``), the archive (``pack``),
scoring (``score``, with the model inputs of each modality in ``inputs``, ``pieces`` per
model and ``verdicts``), the MQTT payloads (``payloads``), topics and sequence numbers
(``topics``); embedding examples (``examples``) and anomaly calibration (``calibrate``).
"""
