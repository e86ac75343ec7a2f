"""snakka: a Kafka-compatible event-streaming broker written in Python."""

__version__ = "0.1.0"
