"""Blocking socket reads of the server tests that speak the Kafka wire protocol by hand: exactly
n bytes, or one size-prefixed frame (a response). A close by the broker is a ConnectionError."""

from __future__ import annotations

import socket
import struct


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return buf


def recv_frame(s: socket.socket) -> bytes:
    """One response frame (its 4-byte size prefix removed)."""
    return recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
