"""Choosing the output: MQTT when configured (optionally beside JSON lines), else JSON lines."""

from __future__ import annotations

from cdml_edge.config import AppConfig
from cdml_edge.fsio import FaultHook
from cdml_edge.outputs.base import Output
from cdml_edge.outputs.jsonl import JsonlOutput
from cdml_edge.outputs.tee import TeeOutput
from cdml_edge.supervisor import Spawn, plain_thread

__all__ = ["TeeOutput", "give_up_held", "held_windows", "leaves", "make_output", "mqtt_leaves"]

REPLAY = "replay"
"""The replay's MQTT client id suffix and spool subfolder."""


def make_output(cfg: AppConfig, spawn: Spawn = plain_thread, *, replay: bool = False) -> Output:
    """The output of ``cfg``: ``MqttPublisher``, ``JsonlOutput``, or both through a tee.

    Without ``mqtt`` the JSON lines go to ``output.jsonl`` (stdout when unset or ``-``).
    ``spawn`` starts the publisher's I/O thread (the agent's supervisor).
    ``replay``: the output of ``cdml-edge replay --publish``, which may run beside the
    live agent: its own client id (``<client id>-replay``; one id would make the broker
    drop the agent's connection) and spool (``<spool.dir>/replay``), and it leaves the
    agent's retained ``status`` and Last Will alone; it publishes JSON in either format.
    With ``mqtt.format: sparkplug_b`` the publisher is wrapped in a ``SparkplugOutput``.
    """
    prefix = cfg.mqtt.topic_prefix if cfg.mqtt else "cdml"
    jsonl: JsonlOutput | None = None
    if cfg.output.jsonl is not None or cfg.mqtt is None:
        jsonl = JsonlOutput(cfg.output.jsonl or "-", topic_prefix=prefix, device=cfg.device.id)
    if cfg.mqtt is None:
        assert jsonl is not None
        return jsonl
    from cdml_edge.outputs.mqtt.publisher import MqttPublisher

    mqtt: Output
    if replay:
        client_id = f"{cfg.mqtt.client_id or f'cdml-edge-{cfg.device.id}'}-{REPLAY}"
        mqtt = MqttPublisher(
            cfg.mqtt.model_copy(update={"client_id": client_id}),
            cfg.device.id,
            cfg.spool.model_copy(update={"dir": cfg.spool.dir / REPLAY}),
            cfg.outbox,
            announce_status=False,
            spawn=spawn,
        )
    elif cfg.mqtt.format == "sparkplug_b":
        from cdml_edge.outputs.sparkplug.output import sparkplug_output

        mqtt = sparkplug_output(cfg, spawn)
    else:
        mqtt = MqttPublisher(cfg.mqtt, cfg.device.id, cfg.spool, cfg.outbox, spawn=spawn)
    return mqtt if jsonl is None else TeeOutput([mqtt, jsonl])


def leaves(output: Output) -> list[Output]:
    """The outputs inside ``output``: the tees (and tees in tees) opened."""
    if isinstance(output, TeeOutput):
        return [leaf for o in output.outputs for leaf in leaves(o)]
    return [output]


def held_windows(output: Output) -> int:
    """Windows the tees in ``output`` hold for a failing part, each once."""
    if not isinstance(output, TeeOutput):
        return 0
    return output.held_windows + sum(held_windows(o) for o in output.outputs)


def give_up_held(output: Output) -> int:
    """Give up the windows the tees in ``output`` hold for a failing part; how many.

    Each gets a last try first (:meth:`TeeOutput.give_up_held`). For a drain (stop, reload):
    a held window is in flight until its part takes it, and the drain would wait for it.
    """
    if not isinstance(output, TeeOutput):
        return 0
    return output.give_up_held() + sum(give_up_held(o) for o in output.outputs)


def mqtt_leaves(output: Output) -> list[Output]:
    """The MQTT publishers inside ``output``."""
    from cdml_edge.outputs.mqtt.publisher import MqttPublisher

    return [o for o in leaves(output) if isinstance(o, MqttPublisher)]


def on_disk_event(output: Output, hook: FaultHook) -> None:
    """Report the disk faults of ``output``'s stores (the MQTT spool) through ``hook``."""
    from cdml_edge.outputs.mqtt.publisher import MqttPublisher

    for o in leaves(output):
        if isinstance(o, MqttPublisher):
            o.spool.faults.on_event = hook


def degraded_parts(output: Output) -> dict[str, str]:
    """What of ``output`` does not fully work now, part -> why.

    The parts: the spool (a full or failing disk), MQTT (the I/O thread, or a broker
    that refuses messages), Home Assistant discovery configs the publisher has not taken
    (``discovery``) and the JSON-lines file (its last batch could not be written, or its
    path names no file it can make).
    """
    from cdml_edge.outputs.mqtt.publisher import MqttPublisher

    out: dict[str, str] = {}
    for o in leaves(output):
        if isinstance(o, JsonlOutput) and o.degraded:
            out["jsonl"] = o.degraded
        elif isinstance(o, MqttPublisher):
            if o.spool.faults.degraded:
                out["spool"] = o.spool.faults.degraded
            if o.io_stopped:
                out["mqtt"] = "the MQTT I/O thread is not running"
            elif o.refusals.degraded:
                out["mqtt"] = o.refusals.degraded
            if held := o.counted("discovery_held"):
                out["discovery"] = (
                    f"{held} Home Assistant discovery configs held (the spool and the outbox "
                    f"cannot take them), offered again: "
                    f"{o.counted('discovery_retries')} retries so far"
                )
    return out
