"""Build hook for snakka's one optional C extension (metadata lives in pyproject.toml).

``snakka.spark._fastdecode`` decodes Kafka records into Arrow buffers for the Spark data
source. It is optional: without a C compiler the build goes on and snakka falls back to the
pure-Python decoder (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "snakka.spark._fastdecode",
            ["src/snakka/spark/_fastdecode.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
