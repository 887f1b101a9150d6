"""What an operator sees: the activity board fed by the agent's messages (or by a broker /
``output.jsonl`` for ``cdml-edge tail``), the status page and the terminal view over it."""

from cdml_edge.agent.view.board import ActivityBoard

__all__ = ["ActivityBoard"]
