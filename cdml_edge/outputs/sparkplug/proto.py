"""The Sparkplug B payload message (``org.eclipse.tahu.protobuf.Payload``) for ``protobuf``.

The descriptor is built here from the specification's message definition, the parts the
agent writes and reads: ``Payload`` (timestamp, metrics, seq, uuid, body) and its
``Metric`` (name, alias, timestamp, datatype, the historical / transient / null flags and
the scalar values), field numbers and types as the specification gives them. Fields left
out (metadata, properties, data sets, templates, extensions) are kept as unknown fields
when a message holding them is parsed. Needs the ``sparkplug`` extra (``protobuf``).
"""

from __future__ import annotations

from typing import Any

from cdml_edge.errors import CdmlError

PACKAGE = "org.eclipse.tahu.protobuf"


class SparkplugUnavailable(CdmlError, ImportError):
    """``mqtt.format: sparkplug_b`` without the ``protobuf`` package installed."""


# Sparkplug B data types (the specification's table)
INT64, UINT64, DOUBLE, BOOLEAN, STRING, DATETIME = 4, 8, 10, 11, 12, 13

# Metric fields: name, number, protobuf type, oneof "value" member
_METRIC_FIELDS: list[tuple[str, int, str, bool]] = [
    ("name", 1, "string", False),
    ("alias", 2, "uint64", False),
    ("timestamp", 3, "uint64", False),
    ("datatype", 4, "uint32", False),
    ("is_historical", 5, "bool", False),
    ("is_transient", 6, "bool", False),
    ("is_null", 7, "bool", False),
    ("int_value", 10, "uint32", True),
    ("long_value", 11, "uint64", True),
    ("float_value", 12, "float", True),
    ("double_value", 13, "double", True),
    ("boolean_value", 14, "bool", True),
    ("string_value", 15, "string", True),
    ("bytes_value", 16, "bytes", True),
]
_PAYLOAD_FIELDS: list[tuple[str, int, str]] = [
    ("timestamp", 1, "uint64"),
    ("seq", 3, "uint64"),
    ("uuid", 4, "string"),
    ("body", 5, "bytes"),
]

_classes: Any = None


def _file_descriptor() -> Any:
    from google.protobuf import descriptor_pb2 as d

    types = {
        "string": d.FieldDescriptorProto.TYPE_STRING,
        "uint64": d.FieldDescriptorProto.TYPE_UINT64,
        "uint32": d.FieldDescriptorProto.TYPE_UINT32,
        "bool": d.FieldDescriptorProto.TYPE_BOOL,
        "float": d.FieldDescriptorProto.TYPE_FLOAT,
        "double": d.FieldDescriptorProto.TYPE_DOUBLE,
        "bytes": d.FieldDescriptorProto.TYPE_BYTES,
    }
    optional = d.FieldDescriptorProto.LABEL_OPTIONAL
    fdp = d.FileDescriptorProto(name="cdml_edge_sparkplug_b.proto", package=PACKAGE)
    fdp.syntax = "proto2"
    payload = fdp.message_type.add(name="Payload")
    for name, number, kind in _PAYLOAD_FIELDS:
        payload.field.add(name=name, number=number, type=types[kind], label=optional)
    payload.field.add(
        name="metrics",
        number=2,
        type=d.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=f".{PACKAGE}.Payload.Metric",
        label=d.FieldDescriptorProto.LABEL_REPEATED,
    )
    payload.extension_range.add(start=6, end=536870912)
    metric = payload.nested_type.add(name="Metric")
    metric.oneof_decl.add(name="value")
    for name, number, kind, in_oneof in _METRIC_FIELDS:
        field = metric.field.add(name=name, number=number, type=types[kind], label=optional)
        if in_oneof:
            field.oneof_index = 0
    return fdp


def payload_class() -> Any:
    """The ``Payload`` message class; :class:`SparkplugUnavailable` without ``protobuf``."""
    global _classes
    if _classes is None:
        try:
            from google.protobuf import descriptor_pool, message_factory
        except ImportError as exc:
            raise SparkplugUnavailable(
                "mqtt.format: sparkplug_b needs the protobuf package: "
                "pip install 'cdml-edge[sparkplug]'"
            ) from exc
        pool = descriptor_pool.DescriptorPool()
        pool.Add(_file_descriptor())
        _classes = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.Payload"))
    return _classes
