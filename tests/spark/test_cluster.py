"""The data source with executors in separate processes (Spark's ``local-cluster`` master,
which the pip distribution of pyspark supports): proves that readers, writers and their
partitions carry everything they need and nothing depends on the driver's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

JOB = Path(__file__).with_name("cluster_job.py")


def test_local_cluster_read_stream_and_write(spark_broker, new_topic, tmp_path):
    bs = spark_broker.bootstrap_servers
    src, dst = new_topic(partitions=2), new_topic(partitions=2)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(3000):
        p.produce(src, key=f"k{i}".encode(), value=b"x" * (i % 50), partition=i % 2,
                  headers=[("i", str(i).encode())])
    assert p.flush(60) == 0

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, str(JOB), bs, src, dst, str(tmp_path / "ckpt")],
                          capture_output=True, text=True, timeout=600, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-5000:]
    out = json.loads(lines[-1])
    assert out["executors"] == 2
    assert len(out["worker_pids"]) >= 2  # rows came out of more than one worker process
    assert out["read"] == {"n": 3000, "bytes": sum(i % 50 for i in range(3000)),
                           "distinct_offsets": 3000, "headers": 3000}
    # 3000 records at 700 per trigger, split 1:1 across the two partitions.
    assert out["stream_batches"] == [700, 700, 700, 700, 200]
    assert out["written"] == {"n": 3000, "marked": 3000}
