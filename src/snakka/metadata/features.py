"""Feature levels (KIP-584): what this broker supports and what the cluster has finalized.

Clients learn them from ApiVersions (v3+) and change behaviour on them, so they are cluster
metadata like topics: the Java 4.0 producer uses Transactions V2 (KIP-890 part 2: no
AddPartitionsToTxn, Produce v12 adds the partition, EndTxn v5 bumps the epoch) only when
``transaction.version`` >= 2 is finalized, and the admin client's ``describeFeatures`` (and
``kafka-features.sh describe``) shows them.

snakka finalizes what a fresh Apache Kafka 4.0 cluster finalizes for the features it implements:
``group.version`` 1 (the KIP-848 consumer group protocol) and ``transaction.version`` 2. The
features of KRaft itself (``metadata.version``, ``kraft.version``) and of replication
(``eligible.leader.replicas.version``) describe machinery snakka does not have and are not
advertised. Levels cannot be changed yet (UpdateFeatures is not served); the epoch is fixed.
"""

from __future__ import annotations

from typing import Final

# name -> (min supported, max supported)
SUPPORTED_FEATURES: Final[dict[str, tuple[int, int]]] = {
    "group.version": (0, 1),
    "transaction.version": (0, 2),
}

# name -> finalized level
FINALIZED_FEATURES: Final[dict[str, int]] = {
    "group.version": 1,
    "transaction.version": 2,
}

# Kafka's is the metadata offset of the last feature change; clients only compare epochs (the
# highest seen wins), so any non-negative constant works while the levels never change.
FINALIZED_FEATURES_EPOCH: Final[int] = 1
