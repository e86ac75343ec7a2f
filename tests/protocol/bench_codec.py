"""Micro-benchmarks of the hot-path codecs (not collected by pytest).

Run: ``.venv/bin/python tests/protocol/bench_codec.py``
"""

from __future__ import annotations

import timeit

from snakka.protocol import encode_response
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)


def bench(label: str, fn, number: int) -> None:
    best = min(timeit.repeat(fn, number=number, repeat=5)) / number
    print(f"{label:70s} {best * 1e6:9.2f} us/op")


def main() -> None:
    produce = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            TopicProduceData(
                name="orders",
                partition_data=[
                    PartitionProduceData(index=i, records=bytes(1024)) for i in range(3)
                ],
            )
        ],
    )
    produce_v9 = produce.encode(9)
    bench(
        "decode ProduceRequest v9 (1 topic, 3 partitions x 1 KiB records)",
        lambda: ProduceRequest.decode(produce_v9, 9),
        100_000,
    )
    bench("encode ProduceRequest v9 (same)", lambda: produce.encode(9), 100_000)

    fetch = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=1,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic="orders",
                partitions=[
                    FetchPartition(partition=i, fetch_offset=100, partition_max_bytes=1 << 20)
                    for i in range(3)
                ],
            )
        ],
    )
    fetch_v12 = fetch.encode(12)
    bench(
        "decode FetchRequest v12 (3 partitions)",
        lambda: FetchRequest.decode(fetch_v12, 12),
        100_000,
    )

    def response(records):
        return FetchResponse(
            responses=[
                FetchableTopicResponse(
                    topic="orders",
                    partitions=[
                        PartitionData(
                            partition_index=i,
                            high_watermark=100,
                            last_stable_offset=100,
                            log_start_offset=0,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=records,
                        )
                        for i in range(3)
                    ],
                )
            ]
        )

    big = response(bytes(1 << 20))
    bench(
        "encode FetchResponse v12 (3 partitions x 1 MiB records) -> bytes",
        lambda: big.encode(12),
        500,
    )

    def write_big():
        out = bytearray()
        big.write(out, 12)

    bench("write FetchResponse v12 (3 x 1 MiB) into a bytearray", write_big, 500)
    bench(
        "encode_response frame FetchResponse v12 (3 x 1 MiB)",
        lambda: encode_response(1, 1, 12, big),
        500,
    )
    small = response(b"")
    bench(
        "encode FetchResponse v12 (3 partitions, empty records: codec overhead)",
        lambda: small.encode(12),
        100_000,
    )


if __name__ == "__main__":
    main()
