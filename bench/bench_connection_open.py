"""Broker CPU per opened connection: connect, one ApiVersions v3 (as librdkafka opens every
connection), read the answer, close; N of them one after another, against ``snakka serve``
in a subprocess. Prints the broker's CPU-seconds (from /proc, load-insensitive) per
connection in microseconds.

A/B of two checkouts, alternated (A B B A ...) on the same machine::

    git archive <old> src | tar -x -C /tmp/old
    .venv/bin/python bench/bench_connection_open.py --a /tmp/old/src --b src --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def one_run(n: int) -> float:
    """In the broker's PYTHONPATH: broker CPU µs per connection over ``n`` connections."""
    sys.path.insert(0, HERE)
    from common import BrokerProcess

    from snakka.protocol import encode_request
    from snakka.protocol.messages.api_versions_request import ApiVersionsRequest

    req = encode_request(1, "rdkafka", 3, ApiVersionsRequest(
        client_software_name="librdkafka", client_software_version="2.6.0"))

    def connect_once(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(req)
            need, buf = None, b""
            while need is None or len(buf) < need:
                chunk = s.recv(65536)
                assert chunk, "closed by the broker"
                buf += chunk
                if need is None and len(buf) >= 4:
                    need = 4 + int.from_bytes(buf[:4], "big")

    with BrokerProcess() as broker:
        for _ in range(200):  # warm-up (imports, first-use paths)
            connect_once(broker.port)
        cpu0 = broker.cpu_seconds()
        for _ in range(n):
            connect_once(broker.port)
        return (broker.cpu_seconds() - cpu0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", help="src directory of checkout A")
    ap.add_argument("--b", help="src directory of checkout B")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", action="store_true", help="(internal) one run in this process")
    args = ap.parse_args()
    if args.one:
        print(json.dumps({"us_per_connection": round(one_run(args.n), 1)}))
        return
    results: dict[str, list[float]] = {"A": [], "B": []}
    order = []
    for r in range(args.rounds):
        order += ["A", "B"] if r % 2 == 0 else ["B", "A"]
    for which in order:
        src = os.path.abspath(args.a if which == "A" else args.b)
        env = dict(os.environ, PYTHONPATH=src)
        out = subprocess.run([sys.executable, __file__, "--one", "--n", str(args.n)], env=env,
                             check=True, capture_output=True, text=True).stdout
        results[which].append(json.loads(out.strip().splitlines()[-1])["us_per_connection"])
        print(which, results[which][-1], "µs broker CPU per connection",
              "load", open("/proc/loadavg").read().split()[:3], flush=True)
    print(json.dumps({k: sorted(v) for k, v in results.items()}))


if __name__ == "__main__":
    main()
