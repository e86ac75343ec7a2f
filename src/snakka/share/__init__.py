"""Share groups (KIP-932, "queues for Kafka"): share-partition state and share sessions.

See ``share.types`` for how the work is split between the group coordinator (membership,
assignment), the share-partition core (acquisition state) and the I/O shell.
"""
