"""Producer ids, sequences and transactions (cores: sans-I/O state machines).

* :mod:`.producer_state`: per-partition idempotent-producer state (Kafka's
  ProducerStateManager): sequence/epoch checks, duplicate detection, snapshots encoding.
"""
