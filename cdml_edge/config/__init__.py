"""The configuration of the appliance (``factory.yaml``).

Every section forbids unknown keys. Sizes accept ``64MiB``-style strings, durations ``2s`` or
``500ms``; ``${VAR}`` and ``${VAR:-default}`` in string values are taken from the environment.
Relative paths are resolved against the folder of the configuration file.
``schema`` holds the sections, ``loading`` reads a file, ``reference`` documents the keys.
"""

from cdml_edge.config.loading import (
    ConfigError,
    config_schema,
    load_config,
    parse_config,
    substitute_env,
)
from cdml_edge.config.schema import (
    MODALITIES,
    AppConfig,
    DeviceConfig,
    HealthConfig,
    LimitsConfig,
    Modality,
    ModelConfig,
    MqttConfig,
    OutboxConfig,
    OutputConfig,
    PackConfig,
    QuarantineConfig,
    ResultsMode,
    RetentionConfig,
    S3Config,
    SourceConfig,
    SparkplugConfig,
    SpoolConfig,
    TlsConfig,
    WindowConfig,
)

__all__ = [
    "MODALITIES",
    "AppConfig",
    "ConfigError",
    "DeviceConfig",
    "HealthConfig",
    "LimitsConfig",
    "Modality",
    "ModelConfig",
    "MqttConfig",
    "OutboxConfig",
    "OutputConfig",
    "PackConfig",
    "QuarantineConfig",
    "ResultsMode",
    "RetentionConfig",
    "S3Config",
    "SourceConfig",
    "SparkplugConfig",
    "SpoolConfig",
    "TlsConfig",
    "WindowConfig",
    "config_schema",
    "load_config",
    "parse_config",
    "substitute_env",
]
