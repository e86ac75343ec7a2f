"""The controller: the one writer of cluster metadata (Kafka's QuorumController, for one node).

See :mod:`snakka.controller.controller`."""

from snakka.controller.controller import Controller, MetadataListener, TopicCreation

__all__ = ["Controller", "MetadataListener", "TopicCreation"]
