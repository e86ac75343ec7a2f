"""Build hook for snakka's optional C extensions (metadata lives in pyproject.toml).

- ``snakka.records._recordwalk`` walks every record of a produced batch to check that it is
  what its header claims (produce-time validation, as Kafka's LogValidator).
- ``snakka.spark._fastdecode`` decodes Kafka records into Arrow buffers for the Spark data
  source.

Both are optional: without a C compiler the build goes on and snakka falls back to the
pure-Python twins (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "snakka.records._recordwalk",
            ["src/snakka/records/_recordwalk.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "snakka.spark._fastdecode",
            ["src/snakka/spark/_fastdecode.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
