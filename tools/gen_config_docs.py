"""Write docs/configuration.md from snakka.config's tables (so the doc cannot drift).

Run: python tools/gen_config_docs.py [--check]
"""

from __future__ import annotations

import pathlib
import sys

from snakka.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    GROUP_CONFIG_BOUNDS,
    GROUP_CONFIGS,
    KAFKA_DYNAMIC_BROKER_CONFIGS,
    LISTENER_RECONFIGURABLE_SSL_CONFIGS,
    PER_BROKER_DYNAMIC_CONFIGS,
    TOPIC_CONFIGS,
    UNAPPLIED_DYNAMIC_BROKER_CONFIGS,
    UNSUPPORTED_GROUP_CONFIGS,
)

OUT = pathlib.Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


# Prose after the tables: behaviour that is not a single config.
NOTES = """
## Internal topics and metadata changes

**Reserved names.** `__cluster_metadata` (the broker's own metadata log, `<log.dir>/__cluster_metadata-0`),
`__consumer_offsets`, `__share_group_state`, `__transaction_state` and `__remote_log_metadata`
belong to the broker; only the owning coordinator creates and writes them. Clients get Kafka's
answers:

| Request | Answer for a reserved name |
|---|---|
| CreateTopics | `42 INVALID_REQUEST` "Creation of internal topic … is prohibited." (`36 TOPIC_ALREADY_EXISTS` if it exists). Kafka refuses only `__cluster_metadata` and lets an admin create `__transaction_state` by hand; snakka refuses every reserved name, because its coordinators create them with the partition count and configs they rely on. |
| CreateTopics of a name that collides (`.` vs `_`) with a reserved one | `17 INVALID_TOPIC_EXCEPTION`, even before the internal topic exists |
| Metadata with auto-creation | never created: `3 UNKNOWN_TOPIC_OR_PARTITION` until the coordinator creates it |
| Produce, DeleteRecords | `17 INVALID_TOPIC_EXCEPTION` ("Cannot append to internal topic …"), as Kafka |
| CreatePartitions, AlterConfigs / IncrementalAlterConfigs | `42 INVALID_REQUEST`: the coordinators map keys to partitions by the count they created, and retention must never delete their state (Kafka allows both) |
| DeleteTopics | `29 TOPIC_AUTHORIZATION_FAILED` |

**How internal topics stay small.** `__consumer_offsets` and `__transaction_state` are
compacted topics, created with Kafka's configs (`cleanup.policy=compact`; `compression.type`
`producer` and `uncompressed` respectively; 100 MiB segments by default, set at creation by
`offsets.topic.segment.bytes` / `transaction.state.log.segment.bytes`): the log cleaner keeps
the latest record of every key. Every record their coordinators write is keyed by what it describes (group, member, offset partition, transactional id) and every
deletion is a tombstone with that key, so what the cleaner keeps replays to the live state. A
data directory from an older snakka (these topics created without a policy and kept small by
snapshot-and-trim) is read as it is; at start-up each such topic gets `cleanup.policy=compact`
through the controller, logged once. With `log.cleaner.enable=false` they grow without bound.
`__share_group_state` (delete policy, as Kafka's) keeps its snapshot-and-trim: its records are
deltas, not one state per key. `__remote_log_metadata` is a delete-policy topic (tiered storage).

**Metadata log replay.** At start-up every record of `__cluster_metadata-0` is replayed. A record
that cannot be decoded stops start-up with one line naming the segment file and offset; it is
never skipped, since every record is a change the broker acknowledged (skipping one would lose a
topic or hand out producer ids twice). A topic record named `__cluster_metadata`, written by
versions that let a client create it, is skipped with a warning.

**Topic creation.** CreateTopics and Metadata auto-creation validate and reserve the names, create
every partition log, and only then commit the topics to the metadata log: all topics of one
request in one append and one fsync. A topic whose log cannot be created (EMFILE, ENOSPC, EACCES)
gets `56 KAFKA_STORAGE_ERROR`, its partial directories are removed, and it is not in metadata
afterwards; the other topics of the request are created. A new partition's directory holds what
Kafka 4.0's holds after a creation (an empty `00000000000000000000.log`, `partition.metadata`,
`leader-epoch-checkpoint`; the index files come with the first records or the clean shutdown,
where Kafka preallocates 10 MB sparse ones), made with 8 file-system calls and no fsync (Kafka:
over 100 calls and 4 fsyncs a partition): the directory is new, so its two small files are written in
place (no temp file and rename) and nothing is listed, stat'ed or unlinked. The durability point
is the metadata log's commit after them. A kill before it leaves directories of a topic that is
not in metadata: start-up finds them stray (they hold no records), renames them and deletes
them in a thread, so creating the topic again starts from new directories; after it, start-up makes any committed
partition's missing directory and rewrites a `partition.metadata` a crash left missing or empty
(docs/benchmarks.md, "Creating 10,000 partitions"). Such a partition, with its topic and index in
the metadata, is adopted with its records although Kafka 4.0 would call a log without a topic id
stray: Kafka's brokers make a partition only after the controller's commit and flush the file
before the first append, while snakka writes it without fsync before the commit (the commit is
the durability point). Any other partition directory the metadata does not own (docs/data-directory.md,
"Stray partition directories") is never adopted. Requests creating at most 8 partitions in
total do their file work on the event loop at once (a request pipelined after them sees the
topics); larger ones create their files in a worker thread and register them in slices, so no
request stalls the broker: Metadata auto-creating 5,000 topics costs time linear in that number
while other clients keep being served. What such a creation builds (the partition logs and
metadata of its topics, ~28 objects a topic) lives as long as its topics, so while a creation of
at least 1,000 partitions runs, CPython's full garbage collections are held off (a full collection
scans the whole heap in one step: 120-200 ms at 10,000 topics), and what is alive when it ends is
frozen (`gc.freeze()`, as `snakka serve` does after start-up) so later collections skip it; the
cost is that cyclic garbage already old at that moment is kept until a deletion of at least
1,000 partitions, which collects the frozen heap once (one full-heap step; `util/heap.py`).
The metadata log batches of a large creation (10,000 KRaft records for a topic of 9,999
partitions) are encoded in the same worker thread; the loop only appends them, in the order the
topics are applied. DeleteTopics of many topics is likewise one metadata
commit, one worker-thread job for the directories and clean-up in slices; CreatePartitions
creates the new logs before it commits the new count; DescribeConfigs of many resources is
answered in slices. Kafka's bounds on creation are the `controller_mutation_rate` quota
(KIP-599), which snakka enforces the same way (docs/quotas.md), and its controller's cap of
10,000 metadata records per operation (`MAX_RECORDS_PER_USER_OP`), which snakka follows, with
Kafka 4.0's answers (tests/reference/test_user_op_records_differential.py): a CreateTopics
asking for more than 10,000 partitions in all is refused whole with POLICY_VIOLATION
"Excessively large number of partitions per request."; one whose valid topics would write more
than 10,000 records (a topic counts its TopicRecord, one record per partition and one per config
given, so one topic has at most 9,999 partitions at creation) and a CreateAcls of more than
10,000 new ACLs are refused whole with POLICY_VIOLATION "Unable to perform excessively large
batch operation." (validate-only too; nothing is created); in a CreatePartitions the topic whose
new partitions take the request past 10,000, and every topic after it (in Kafka's order, a
java.util.HashSet's), fails with UNKNOWN_SERVER_ERROR (Kafka 4.0 also commits the part of that
topic that fit: a topic of 1 partition grown to 10,002 was answered the error and had 10,001
partitions afterwards, checked by hand; snakka leaves it as it was). A Metadata request's auto-creations count as one
CreateTopics (Kafka's broker sends them so): more than 10,000 records (a topic: 1 +
`num.partitions`) and none is created, the names answered UNKNOWN_TOPIC_OR_PARTITION. A topic may
grow past 10,000 partitions by several CreatePartitions, as on Kafka.
"""


def render() -> str:
    lines = [
        "# Configuration",
        "",
        "<!-- generated by tools/gen_config_docs.py from src/snakka/config.py; do not edit -->",
        "",
        "snakka uses Apache Kafka's configuration names and semantics. Broker configs come from a",
        "`server.properties` file (`snakka serve -c FILE`) and `-o key=value` overrides; topic",
        "configs are set with CreateTopics / AlterConfigs / IncrementalAlterConfigs (any Kafka admin",
        "tool, or `snakka topics create --config k=v`). A topic config without an override takes",
        "its broker synonym's value, then the default; DescribeConfigs reports which source won.",
        "",
        "Differences from Kafka's defaults: `listeners` binds `localhost` (IPv4 and IPv6);",
        "`log.dirs` is `./snakka-data`; `log.flush.scheduler.interval.ms` is 1000, so data is fsynced",
        "by a background group commit every second (Kafka relies on replication instead);",
        "`max.connections` is bounded (10000). Strict durability: `log.flush.interval.messages=1`",
        "(or `snakka serve --strict-durability`, or `flush.messages=1` on a topic): a write is",
        "acknowledged only after it is fsynced.",
        "",
        "## Topic configs",
        "",
        "| name | type | default | broker synonym | description |",
        "|---|---|---|---|---|",
    ]
    for d in TOPIC_CONFIGS.values():
        lines.append(f"| `{d.name}` | {d.type.name.lower()} | `{d.default}` | "
                     f"{'`' + d.broker_synonym + '`' if d.broker_synonym else ''} | {d.doc} |")
    lines += ["", "## Group configs", "",
              "Per-group overrides (Kafka's group configs), set with IncrementalAlterConfigs / "
              "AlterConfigs on resource type GROUP (`kafka-configs.sh --entity-type groups`, or "
              "`snakka groups configs GROUP --set k=v`) and "
              "kept in the metadata log. A group without an override uses the broker synonym. "
              "Integer values must lie within the broker's bounds (`group.share.min.*` / "
              "`group.share.max.*`); others are rejected with INVALID_CONFIG. Not supported "
              "(rejected rather than stored without effect): "
              + ", ".join(f"`{n}`" for n in sorted(UNSUPPORTED_GROUP_CONFIGS)) + ".", "",
              "| name | type | default | broker synonym | bounds | description |",
              "|---|---|---|---|---|---|"]
    for d in GROUP_CONFIGS.values():
        bounds = GROUP_CONFIG_BOUNDS.get(d.name)
        lines.append(f"| `{d.name}` | {d.type.name.lower()} | `{d.default}` | "
                     f"{'`' + d.broker_synonym + '`' if d.broker_synonym else ''} | "
                     f"{'`' + bounds[0] + '` .. `' + bounds[1] + '`' if bounds else ''} | "
                     f"{d.doc} |")
    lines += ["", "## Broker configs", "",
              "Dynamic: may be changed at run time with IncrementalAlterConfigs / AlterConfigs "
              "on the BROKER resource (this node's id, or the empty name for the cluster "
              "default); changes are kept in the metadata log and take effect at once. "
              "The set is Kafka 4.0's (DescribeConfigs answers `read_only` as Kafka does), and "
              "so are the answers to a change. Besides the cluster-wide topic defaults "
              "(`log.*`, applied to every partition at once), these take effect at run time: "
              "`max.connections`, `max.connections.per.ip`, "
              "`max.connections.per.ip.overrides` and `max.connection.creation.rate` (the "
              "next accepted connection; open ones stay), `log.cleaner.backoff.ms`, `log.cleaner.dedupe.buffer.size`, "
              "`log.cleaner.io.buffer.size`, `log.cleaner.io.buffer.load.factor` and "
              "`log.cleaner.io.max.bytes.per.second` (the cleaner wakes and uses them from "
              "its next pass), `remote.fetch.max.wait.ms` and "
              "`remote.list.offsets.request.timeout.ms` (the next request), "
              "`remote.log.manager.copy.max.bytes.per.second` (the next segment copy), "
              "`remote.log.manager.fetch.max.bytes.per.second` (the next remote read), "
              "`producer.id.expiration.ms` and the replication throttles.", "",
              "Answers to a change, as Kafka's:", "",
              "- SET of a static config (`log.dirs`, `num.partitions`, "
              "`auto.create.topics.enable`, `fetch.max.bytes`, ...): INVALID_REQUEST "
              "`Cannot update these configs dynamically: Set(<names>)`. A DELETE of any config "
              "is accepted (it removes a stored value, if any).",
              "- A value the config's type or range refuses: INVALID_REQUEST with Kafka's "
              "message, e.g. `Invalid value abc for configuration log.retention.ms: Not a "
              "number of type LONG`, `... Value must be at least 0`. The same messages name a "
              "bad value in server.properties at start.",
              "- A name snakka does not know (a plugin's config, `foo.bar.custom`): stored as "
              "given, like Kafka; nothing reads it.",
              "- Per-broker configs (listeners, SSL, SASL) on the cluster default (empty name): "
              "INVALID_REQUEST `Cannot update these configs at default cluster level, broker "
              "id must be specified: Set(<names>)`; unprefixed SSL key/trust store configs: "
              "`These security configs can be dynamically updated only per-listener using the "
              "listener prefix`.",
              "",
              "**Known gap: Kafka-dynamic configs snakka cannot change at run time.** Kafka "
              "reconfigures these live; snakka has no such thread pool or applies them only at "
              "start, so a SET is refused with INVALID_REQUEST (Kafka's code for a "
              "reconfiguration it cannot make) and the message `snakka cannot update these "
              "configs at run time (set them in server.properties and restart): Set(<names>)` "
              "instead of being stored without effect. DescribeConfigs still reports them "
              "`read_only=false`, as Kafka does: "
              + ", ".join(f"`{n}`" for n in sorted(UNAPPLIED_DYNAMIC_BROKER_CONFIGS)) + "; "
              "also every `listener.name.<l>.<config>` other than the per-listener SSL key and "
              "trust stores.",
              "",
              "**Upgrading from an older snakka.** Older versions let `num.partitions`, "
              "`auto.create.topics.enable` and `fetch.max.bytes` change at run time. A value "
              "stored that way is ignored (the static value is in force) and the broker logs "
              "a warning naming it at start; remove it with `kafka-configs.sh --alter "
              "--entity-type brokers --entity-default --delete-config num.partitions` (or "
              "`--entity-name <id>`), and set it in server.properties instead.", "",
              "| name | type | default | dynamic | description |", "|---|---|---|---|---|"]
    def per_listener(name: str) -> str:
        # Kafka's per-broker, per-listener SSL configs (docs/security.md, certificate reload).
        return ("per listener (`listener.name.<l>.`), this node only"
                if name in LISTENER_RECONFIGURABLE_SSL_CONFIGS else "")

    def dynamic(name: str) -> str:
        if name in DYNAMIC_BROKER_CONFIGS:
            return "yes"
        if per_listener(name):
            return per_listener(name)
        if name in KAFKA_DYNAMIC_BROKER_CONFIGS:
            return ("no (Kafka: yes" + (", per broker" if name in PER_BROKER_DYNAMIC_CONFIGS
                                        else "") + "; known gap)")
        return ""

    for name in sorted(BROKER_CONFIGS):
        d = BROKER_CONFIGS[name]
        lines.append(f"| `{name}` | {d.type.name.lower()} | "
                     f"{'`' + d.default + '`' if d.default is not None else '(unset)'} | "
                     f"{dynamic(name)} | "
                     f"{d.doc} |")
    lines += ["", "## Bounds for hostile clients", "",
              "- Connections: `max.connections` (broker-wide) and `max.connections.per.ip` "
              "(+ `max.connections.per.ip.overrides`); a connection beyond either is reset at "
              "once and refusals are logged at most once per address every 10 s. Kafka's "
              "acceptor waits for a free slot at `max.connections` instead; a single node has "
              "no inter-broker listener to protect, so snakka refuses.",
              "- Time: a request must arrive completely within "
              "`socket.request.arrival.timeout.ms` (slowloris); a connection with nothing read "
              "and nothing drained for `connections.max.idle.ms` is closed, and aborted (its "
              "unsent responses dropped) when its client stopped reading.",
              "- Memory for slow readers: response bytes are counted from the moment they exist "
              "until the socket took them. A Fetch reserves from `queued.max.response.bytes` "
              "before reading from disk (less when little is left, never less than the first "
              "whole batch), and waits up to its `max_wait_ms` (then answers without records) "
              "when the budget is spent and its connection still holds unsent bytes; such "
              "connections are not read from until they take their bytes. Response memory is "
              "therefore at most `queued.max.response.bytes` plus one response (a batch, or a "
              "small non-Fetch response) per connection. On plaintext listeners record sets of "
              "64 KiB or more are sent from the segment files with sendfile and hold no memory "
              "(they still count in the budget, conservatively); on TLS listeners a Fetch "
              "response holds at most `snakka.fetch.memory.max.bytes` of records.",
              "- Response size: a Fetch response holds at most "
              "`snakka.fetch.response.target.bytes` (30 MiB) of records whatever the client "
              "asks for (Kafka's `fetch.max.bytes` applies too; the smaller wins), and the "
              "first whole batch always comes (KIP-74). 30 MiB is below glibc's largest mmap "
              "threshold, so a client that allocates a buffer per response (librdkafka, "
              "kafka-python, aiokafka) reuses heap memory instead of faulting in a fresh "
              "mapping: ck-large's consumer used 0.50 instead of 0.82 CPU-s and 111k instead "
              "of 306k page faults per GB; the broker spent 0.21-0.25 instead of 0.17-0.23 "
              "CPU-s per GB (docs/benchmarks.md, "
              "\"Large consume: response size\").",
              "- Fixed bounds that are not configs (protocol ranges such as INT32_MAX, "
              "10,000 metadata records per admin operation, 10,000 pending classic members per group, 10 "
              "record-error messages per batch, ...) have one definition each in "
              "`src/snakka/limits.py`, which says what each bounds, why that value, and the "
              "Kafka name it mirrors."]
    return "\n".join(lines) + "\n" + NOTES


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date; run python tools/gen_config_docs.py")
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
