"""What MQTT accepts in a topic prefix, a client id and a user name, checked by validation.

A broker meets a topic with a NUL in the Last Will by closing the connection without a
reason (Mosquitto does), so the agent would retry forever; these rules let ``config
validate`` say it instead. From the MQTT 3.1.1 and 5 specifications: a UTF-8 string holds no
U+0000 and no surrogate and is at most 65,535 bytes, control characters are discouraged
(refused here), a topic name holds no wildcard (``+``, ``#``), and topics starting with
``$`` are the broker's own (``$SYS``). Each function returns the problem, or ``None``.
"""

from __future__ import annotations

import unicodedata

MAX_STRING_BYTES = 65_535
MAX_PREFIX_BYTES = 1024
"""A prefix leaves room in the 65,535 bytes of a topic for the device, source and kind."""


def string_problem(value: str) -> str | None:
    """Why ``value`` is not a usable MQTT UTF-8 string, or ``None``."""
    for i, ch in enumerate(value):
        if ch == "\0":
            return f"holds a NUL character (at {i})"
        if unicodedata.category(ch) in ("Cc", "Cs"):
            return f"holds the control or surrogate character {ch!r} (at {i})"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if size > MAX_STRING_BYTES:
        return f"is {size} bytes in UTF-8, over the {MAX_STRING_BYTES} MQTT allows"
    return None


def prefix_problem(value: str) -> str | None:
    """Why ``value`` cannot start every topic (``{prefix}/{device}/...``), or ``None``."""
    if not value:
        return "must be non-empty"
    problem = string_problem(value)
    if problem is not None:
        return problem
    if "+" in value or "#" in value:
        return "must not hold the MQTT wildcards '+' or '#'"
    if value.startswith("/"):
        return "must not start with '/' (an empty first topic level)"
    if value.startswith("$"):
        return "must not start with '$' (topics of the broker itself, such as $SYS)"
    if "//" in value.rstrip("/"):
        return "must not hold an empty topic level ('//')"
    if len(value.encode("utf-8")) > MAX_PREFIX_BYTES:
        return f"must be at most {MAX_PREFIX_BYTES} bytes in UTF-8"
    return None
