"""The reference streaming pipeline (issue 5): snakka's main demo of Spark on Kafka topics.

    snakka pipeline demo        # embedded broker + Spark local[*], generator, stream, check

Modules: :mod:`.events` (the deterministic clickstream), :mod:`.generator` (produce it to a
topic), :mod:`.job` (the Structured Streaming job and its progress display), :mod:`.check`
(the batch cross-check), :mod:`.reference` (a pure-Python model of Spark's watermark rules,
the tests' oracle) and :mod:`.session` (the SparkSession and output directory). The
one-command orchestration is the entry point :mod:`snakka.demo` (it may start an embedded
broker, which this client-side package never imports). Importing this package does not import
pyspark; the Spark modules import it when used.
"""
