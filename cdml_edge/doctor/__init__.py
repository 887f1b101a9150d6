"""``cdml-edge doctor``: check that a configuration can actually run on this machine.

Each check gives one :class:`Check` (a name, ok or not, a one-line detail, maybe a warning);
:func:`diagnose` loads a configuration and runs them all into a :class:`DoctorReport`:

* :mod:`~cdml_edge.doctor.system` — the native archive reader is built (no silent
  pure-Python fallback on a slow board); whose folder access is judged (``--user``, or a
  warning when run as root); the systemd unit lets the agent write its folders;
* :mod:`~cdml_edge.doctor.model_checks` — onnxruntime loads every configured model with the chosen
  execution provider and runs one inference on an all-zero input shaped from its ``ModelSpec``;
* :mod:`~cdml_edge.doctor.sources` — source folders exist and are readable (writable when
  files are deleted or moved), cameras are there or reachable;
* :mod:`~cdml_edge.doctor.folders` — spool, retention and quarantine folders are writable,
  with room for their byte bounds (:mod:`~cdml_edge.doctor.access` judges another account);
* :mod:`~cdml_edge.doctor.broker` — the broker is reachable: TCP, the TLS handshake for
  ``mqtts://``, then an MQTT CONNECT.

:mod:`~cdml_edge.doctor.unit` also writes the unit drop-in install.sh installs.
"""

from cdml_edge.doctor.check import DEFAULT_TIMEOUT_S, Check
from cdml_edge.doctor.report import DoctorReport
from cdml_edge.doctor.run import diagnose, run_checks

__all__ = ["DEFAULT_TIMEOUT_S", "Check", "DoctorReport", "diagnose", "run_checks"]
