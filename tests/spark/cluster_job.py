"""Run by tests/spark/test_cluster.py in its own process: the snakka source and sink on a
``local-cluster`` master, whose executors are separate JVMs with their own Python workers,
so nothing may depend on state in the driver process.

    python tests/spark/cluster_job.py BOOTSTRAP SRC_TOPIC DST_TOPIC CHECKPOINT_DIR

Prints one JSON line with what it read and wrote.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main() -> None:
    bootstrap, src, dst, ckpt = sys.argv[1:5]
    from pyspark.sql import SparkSession

    import snakka.spark

    spark = (SparkSession.builder.master(os.environ.get("SNAKKA_TEST_MASTER",
                                                        "local-cluster[2,1,1024]"))
             .appName("snakka-cluster-test")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    snakka.spark.register(spark)
    sc = spark.sparkContext
    executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver

    def reader():
        return spark.read.format("snakka").option("kafka.bootstrap.servers", bootstrap)

    df = reader().option("subscribe", src).option("minPartitions", "4").option(
        "includeHeaders", "true").load()
    batch = df.selectExpr("count(*) as n", "sum(length(value)) as bytes",
                          "count(distinct partition, offset) as distinct_offsets",
                          "sum(size(headers)) as headers").collect()[0]
    # Which executor processes (host:pid of their Python workers) did the reading?
    pids = (df.rdd.mapPartitions(lambda it: [(os.getpid(), sum(1 for _ in it))])
            .collect())

    # Streaming: read everything (AvailableNow), transform, write back through the sink.
    q = (spark.readStream.format("snakka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "700").load()
         .selectExpr("key", "concat(value, cast('!' as binary)) as value")
         .writeStream.format("snakka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", dst).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    batches = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    written = reader().option("subscribe", dst).load().selectExpr(
        "count(*) as n", "sum(cast(substring(value, -1, 1) = cast('!' as binary) as int)) as marked"
    ).collect()[0]
    print(json.dumps({
        "executors": executors,
        "worker_pids": sorted({p for p, n in pids if n}),
        "read": batch.asDict(),
        "stream_batches": batches,
        "written": written.asDict(),
    }), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
