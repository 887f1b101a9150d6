"""The MQTT output: publisher, in-memory outbox, disk spool, paho client, embedded broker."""
