"""The live appliance (``cdml-edge run``): the wiring and the per-window pipeline only.

The components it wires live beside it (``intake/``, ``outputs/``, ``health/``, ``store/``)
and serve ``live/``, ``retrain/``, ``doctor/`` and ``tail/`` alike; nothing beside this
package imports it. Here: ``app`` (:class:`~cdml_edge.agent.app.Agent`, started as named
steps), ``workers`` (queue, threads, drain) handing each window to ``pipeline``
(pack -> score -> quarantine -> retain -> output -> finish), ``retry`` for failed windows,
``error_events`` for the ``{source}/error`` and ``{source}/camera`` events, ``runners`` for
the models (loading, warm-up, budget charges), ``preflight``, ``state``, ``startup`` and
``trial`` (``cdml-edge test``).
"""
