"""Health of the agent: sd_notify, a progress-tied watchdog, Prometheus metrics and /healthz.

Metrics and /healthz are served by ``server``; the ``status`` / ``health`` messages are
published by ``reporter.HealthReporter``.

Wiring in the agent::

    notifier = SdNotifier()                         # no-op outside systemd
    watchdog = ProgressWatchdog(notifier, cfg.health.stall_after)
    watchdog.start()                                 # idle counts as healthy while loading
    metrics = Metrics(version=__version__, device=device)
    server = metrics.serve(cfg.health.metrics_host, cfg.health.metrics_port, watchdog=watchdog)
    ...load models, one warm-up inference...
    notifier.ready("running")
    # per window:  watchdog.set_busy(n_pending) as work queues; watchdog.progress() when done
    # SIGHUP:      notifier.reloading(); reload; notifier.ready()
    # SIGTERM:     notifier.stopping(); drain; watchdog.stop(); server.close()
"""

from cdml_edge.health.board import ActivityBoard
from cdml_edge.health.metrics import Metrics
from cdml_edge.health.notify import SdNotifier
from cdml_edge.health.server import MetricsServer, healthz_body
from cdml_edge.health.watchdog import HealthState, ProgressWatchdog

__all__ = [
    "ActivityBoard",
    "HealthState",
    "Metrics",
    "MetricsServer",
    "ProgressWatchdog",
    "SdNotifier",
    "healthz_body",
]
