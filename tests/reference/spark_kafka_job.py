"""A Spark job using Spark's JVM Kafka connector (``format("kafka")``) against a broker.

Run by test_spark_connector.py in its own process (one SparkContext per JVM: the connector's
jars must be on ``spark.jars`` when the context starts, which the in-process Spark of
tests/spark cannot give): ``python spark_kafka_job.py BOOTSTRAP TOPIC JARS``. It writes 10
rows in one batch, then, where the connector can run on this pyspark (it is built for Spark
4.0: on later Spark versions its reader fails with NoClassDefFoundError on Spark-internal
logging classes), reads them back in a batch and with a streaming query. Prints one JSON line
of results; errors are results too (the test asserts on them).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main(bootstrap: str, topic: str, jars: str) -> dict:
    import pyspark
    from pyspark.sql import SparkSession

    out: dict = {"pyspark": pyspark.__version__}
    spark = (SparkSession.builder.master("local[1]").appName("snakka-kafka-connector")
             .config("spark.jars", jars).config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = [(f"k{i}", f"v{i}") for i in range(10)]
        try:
            (spark.createDataFrame(rows, ["key", "value"]).write.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())
            out["write"] = "ok"
        except Exception as e:  # reported, asserted by the test
            out["write"] = f"error: {str(e)[:2000]}"
        if not pyspark.__version__.startswith("4.0."):
            return out
        reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        try:
            got = reader.load().selectExpr("CAST(key AS STRING) k",
                                           "CAST(value AS STRING) v").collect()
            out["read"] = sorted([r.k, r.v] for r in got)
        except Exception as e:
            out["read"] = f"error: {str(e)[:2000]}"
        try:
            q = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .selectExpr("CAST(value AS STRING) v").writeStream.format("memory")
                 .queryName("snakka_stream").start())
            try:
                q.processAllAvailable()
                out["stream"] = sorted(r.v for r in spark.sql("SELECT v FROM snakka_stream")
                                       .collect())
            finally:
                q.stop()
        except Exception as e:
            out["stream"] = f"error: {str(e)[:2000]}"
        return out
    finally:
        spark.stop()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(*sys.argv[1:4])), flush=True)
