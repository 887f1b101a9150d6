"""Where results go: the :class:`~cdml_edge.outputs.base.Output` contract, JSON lines, MQTT."""
