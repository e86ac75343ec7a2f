"""Every fixed bound of snakka that is not a config: protocol integer ranges and internal limits.

What this module owns
    The one definition of each constant below: what it bounds, why that value, and the Kafka
    name when it mirrors one. A bound a user may change is a *config* instead (Kafka's name,
    default and validation in :mod:`snakka.config`, a line in docs/configuration.md); a constant
    here is either fixed by the protocol or an internal safety bound whose behaviour when hit is
    described next to it.

Why a leaf
    It imports nothing, so every layer may use it: the record-batch code, the protocol client
    (``snakka.client``, ``snakka.spark``), the cores and the shells. Keep it that way.

Layout: protocol ranges first, then one section per owner (records, metadata, groups, fetch
sessions, producer state), then the bounds of the I/O shells (broker wiring, server,
coordinators, storage), which those modules import from here.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- protocol ranges

#: Java's ``Integer.MAX_VALUE``: the largest INT32 on the wire. Producer sequences wrap from
#: here to 0 (Kafka's ``DefaultRecordBatch.incrementSequence``); session epochs and correlation
#: ids wrap before it; INT configs (``group.max.size``, ...) are bounded by it; a pre-v3 Fetch
#: has no MaxBytes field and means "no limit", i.e. this value.
INT32_MAX = 2**31 - 1

#: Java's ``Long.MIN_VALUE`` / ``Long.MAX_VALUE``: the INT64 range (offsets, timestamps, LONG
#: configs such as ``retention.bytes``).
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# ----------------------------------------------------------------------------------- records

#: Default of ``snakka.message.max.uncompressed.bytes`` (its definition in snakka.config uses
#: this value): the most a produced batch's records may decompress to, so a small
#: "decompression bomb" costs at most this much memory and time. 64 MiB is well above any
#: batch a client builds (``max.request.size`` defaults to 1 MiB). Kept here because
#: ``snakka.records``, used by the protocol client too, never imports the broker's config.
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024

#: Per produced batch, the invalid records that get an error *message*; further ones get only
#: their index (Kafka's RecordErrors). Bounds the Python work of answering a hostile batch full
#: of bad records.
MAX_RECORD_ERROR_MESSAGES = 10

# ---------------------------------------------------------------------------------- metadata

#: Kafka's ``Topic.MAX_NAME_LENGTH``: a topic's directory name is ``<topic>-<partition>``, and
#: 249 characters leave room for the partition suffix within a 255-byte file name.
MAX_TOPIC_NAME_LENGTH = 249

#: Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP``: the metadata records one user operation
#: may write, counted as Kafka's controller writes them (a topic: one TopicRecord, one
#: PartitionRecord per partition, one ConfigRecord per config given; a new partition: one
#: PartitionRecord; an ACL: one record). A CreateTopics, CreatePartitions or CreateAcls request
#: that would write more fails as a whole, every entry POLICY_VIOLATION "Unable to perform
#: excessively large batch operation." (validate-only requests too), so a typo like 1000000
#: partitions creates nothing; a DeleteAcls filter that would take its request beyond it fails
#: alone (UNKNOWN_SERVER_ERROR, Kafka's "Cannot remove more than 10000 acls in a single delete
#: operation."). One request's metadata append and its replay stay bounded.
MAX_RECORDS_PER_USER_OP = 10_000

#: Client-quota rate entities (and resolution cache entries) one quota manager keeps
#: (metadata/client_quotas.py). Kafka keeps a client's sensors until an hour of inactivity;
#: here, at the bound, entities idle for a whole quota span are dropped first, then half of
#: the rest (a dropped entity starts a fresh rate: it may briefly exceed its quota).
QUOTA_SENSORS_MAX = 100_000

# ------------------------------------------------------------------------------------ groups

#: How long a member added by a still-unanswered classic JoinGroup may wait before it is
#: dropped: it has no session yet, and a client whose connection broke retries with a fresh
#: join (Kafka's new-member join timeout, also 5 minutes).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

#: Member ids handed out with MEMBER_ID_REQUIRED that have not rejoined yet, per classic group.
#: Kafka leaves these unbounded (they expire after the session timeout); a client looping on
#: JoinGroup could otherwise grow a group's memory without limit. Past it, new members get
#: GROUP_MAX_SIZE_REACHED.
MAX_PENDING_MEMBERS_PER_GROUP = 10_000

#: Compiled ``subscribed_topic_regex`` patterns cached by the KIP-848 core (LRU). Patterns are
#: per group, usually a handful; the bound keeps a client cycling through patterns from
#: growing the cache.
REGEX_CACHE_SIZE = 1024

# ---------------------------------------------------------------------------- fetch sessions

#: Kafka's ``min.incremental.fetch.session.eviction.ms`` default: a fetch session unused for
#: this long may be evicted by a new one when ``max.incremental.fetch.session.cache.slots`` are
#: all taken (a busy session is never evicted for a newer one before then).
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000

# ---------------------------------------------------------------------------- producer state

#: Kafka's ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``: the latest batches remembered per
#: producer id for duplicate detection, which is what a client's
#: ``max.in.flight.requests.per.connection`` (at most 5 with idempotence) can retry.
NUM_BATCHES_TO_RETAIN = 5

# ------------------------------------------------------------ broker wiring (broker.py)

#: File descriptors that must be free once every log is loaded, or start-up fails loudly
#: instead of listening without being able to accept a connection.
MIN_FREE_FDS_AT_START = 32

#: Partitions one CreateTopics request may create on the event loop itself (about 1-3 ms of
#: file work each); larger creations make their files in a worker thread.
INLINE_CREATE_PARTITIONS = 8

#: Topics registered in metadata per event-loop slice when a large creation finishes (keeps a
#: slice well under the ~50 ms a request may hold the loop).
REGISTER_TOPICS_PER_SLICE = 500

#: CPython's generation-2 collection threshold (young collections between two full ones)
#: while a large creation builds long-lived objects (util.heap.long_lived): high enough that
#: no full collection, one event-loop step proportional to the whole heap, runs meanwhile.
GC_FULL_COLLECTION_HOLD_THRESHOLD = 1_000_000

#: Partitions a creation must make for its objects to be built under util.heap.long_lived
#: (full collections held off, then frozen): below it a full collection of what it made is
#: short, and freezing (never reclaiming old cyclic garbage) is not worth it.
GC_LONG_LIVED_MIN_PARTITIONS = 1_000

# ------------------------------------------------------------------- server (connections)

#: asyncio write-buffer marks of a client connection (``transport.set_write_buffer_limits``):
#: 0/0 pauses writing whenever anything is buffered and resumes once all of it is written, so
#: the connection itself accounts every buffered byte against
#: ``queued.max.response.bytes.per.connection`` (the configured bound) instead of asyncio
#: holding an unaccounted 64 KiB default.
TRANSPORT_WRITE_BUFFER_HIGH = 0
TRANSPORT_WRITE_BUFFER_LOW = 0

# ---------------------------------------------------------------- coordinators' internal topics
#: (Their segment sizes are broker configs under Kafka's names: offsets.topic.segment.bytes,
#: transaction.state.log.segment.bytes, share.coordinator.state.topic.segment.bytes.)

#: Snapshot-and-trim of the internal topics that are not compacted (``__share_group_state``,
#: ``__remote_log_metadata``): once a partition holds more than COMPACT_MIN_RECORDS records and
#: more than COMPACT_RATIO times its live keys, the live records are appended again as a
#: snapshot and the log start offset moves past everything before it.
COMPACT_MIN_RECORDS = 10_000
COMPACT_RATIO = 4

#: Records per batch when a coordinator writes a snapshot (bounds one batch's size and the
#: event-loop time of building it).
SNAPSHOT_BATCH_RECORDS = 5_000

#: How long the transaction coordinator waits before it writes again a COMMIT/ABORT marker that
#: failed (a disk error); meanwhile the transactional id answers CONCURRENT_TRANSACTIONS. Kafka
#: retries its marker requests at the inter-broker client's backoff, 100 ms.
TXN_MARKER_RETRY_BACKOFF_MS = 200

# ------------------------------------------------------------------------------------- storage

#: Entries of a partition's next-offset -> file-position cache (sequential consumers hit it;
#: the bound keeps many readers at different offsets from growing it).
READ_CACHE_ENTRIES = 64

#: Producer-state snapshots kept per partition: the latest and one fallback in case the latest
#: is torn by a crash.
SNAPSHOTS_KEPT = 2

#: Bytes read at a time when recovery or an index rebuild scans a segment (bounds memory and
#: the event-loop time of one step).
RECOVERY_CHUNK = 1024 * 1024

# ------------------------------------------------------------------------------------- metrics

#: Bytes of an HTTP request's line and headers the metrics endpoint reads (server/metrics.py);
#: a longer request is answered 431 and closed.
METRICS_HTTP_MAX_HEADER_BYTES = 8192

#: Seconds a scraper may take to send its request before the metrics endpoint closes it.
METRICS_HTTP_REQUEST_TIMEOUT_S = 10.0

#: Scrapes formatted at once; more concurrent scrapes are answered 503 (a scraper storm must not
#: take the broker's CPU).
METRICS_MAX_CONCURRENT_SCRAPES = 4

#: How often the event-loop lag probe measures the loop's scheduling delay.
EVENT_LOOP_LAG_PROBE_INTERVAL_S = 0.5

# ------------------------------------------------------------------ client metrics (KIP-714)

#: Client instances the ClientMetricsManager keeps (snakka.telemetry.manager): Kafka's
#: ``ClientMetricsManager.CACHE_MAX_SIZE`` (16k active client connections per broker). Past it
#: the least recently seen instance is forgotten (its next push gets UNKNOWN_SUBSCRIPTION_ID
#: and the client fetches its subscription again, as after a move to another broker).
CLIENT_METRICS_INSTANCES_MAX = 16_384

#: Kafka's ``ClientMetricsManager.DEFAULT_CACHE_EXPIRY_MS``: a client instance not heard from
#: for max(this, 3 x its push interval) is forgotten.
CLIENT_METRICS_CACHE_EXPIRY_MS = 60_000

#: Bytes a pushed OTLP payload may decompress to (a small compressed "bomb" costs at most this
#: much); a payload that would decompress beyond it is INVALID_RECORD. 64 x the default
#: ``telemetry.max.bytes`` and far beyond what a client's metrics take (a few KiB).
CLIENT_METRICS_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

#: Labels one client-metric series takes from its OTLP data point attributes (besides
#: client_instance_id and client_id); further attributes are ignored, so a client cannot make
#: one series arbitrarily wide.
CLIENT_METRICS_MAX_ATTRIBUTES = 16

#: Characters of one label value taken from an OTLP attribute (longer values are cut).
CLIENT_METRICS_MAX_LABEL_VALUE_CHARS = 256
