"""The live appliance (``cdml-edge run``), folders in the order data flows through them.

- intake: ``sources/`` (``folder`` watch with ``pending`` completeness, ``camera`` with its
  ``camera_status``, ``factory`` from the config; a camera's OpenCV runs in the process of
  ``capture/``) feeding ``windows`` (``Windower``, the global ``ByteBudget``);
- windows in flight: ``workers`` (queue, threads, drain) handing each window to
  ``processing`` (``WindowProcessor``: pack -> score -> quarantine -> retain -> output ->
  ``on_done`` through ``lifecycle``), with ``retry`` for failed windows, ``events`` for
  error events and ``models`` for loading, warm-up and budget charges;
- outputs: ``outputs/`` (``base`` contract, ``factory`` and tee, ``jsonl``, ``mqtt/``:
  publisher, client, outbox, spool and its format, TLS, embedded broker);
- health: ``health/`` (sd_notify, progress watchdog, Prometheus metrics and their HTTP
  server, the status / health reporter);
- ``app``: :class:`~cdml_edge.agent.app.Agent`, which builds, starts, stops, drains and
  reloads all of the above.
"""
