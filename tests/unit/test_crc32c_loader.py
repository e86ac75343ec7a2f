"""snakka.util.crc32c loads the crc32c package's C function without the package's __init__
(start-up time): it must be that same function, the hardware-accelerated one where the package
has it, on every input the record batches feed it (whole buffers, continuation values)."""

from __future__ import annotations

import crc32c as package
from hypothesis import given
from hypothesis import strategies as st

from snakka.util.crc32c import crc32c


@given(data=st.binary(max_size=4096), start=st.integers(0, 2**32 - 1))
def test_same_checksums_as_the_package(data: bytes, start: int) -> None:
    assert crc32c(data) == package.crc32c(data)
    assert crc32c(data, start) == package.crc32c(data, start)
    assert crc32c(memoryview(bytearray(data))) == package.crc32c(data)


def test_kafka_check_value() -> None:
    # CRC-32C of "123456789" (the standard check value).
    assert crc32c(b"123456789") == 0xE3069283
