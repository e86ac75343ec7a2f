"""Which S3 library the tiered-storage backend uses: obstore vs boto3, measured.

Against a loopback S3 server (moto's server mode, in its own process so it never shares a
GIL with the client under test), each library runs in a fresh interpreter and reports:

- ``import_ms`` / ``rss_mb``: time to import the library and build a client, and the resident
  memory that added (what every broker with tiered storage pays at start);
- ``put_64mib_mbs`` / ``get_64mib_mbs``: one 64 MiB object (multipart upload in 25 MiB
  parts, rsm.config.storage.s3.multipart.upload.part.size's default, 2 parts in flight);
- ``put_1mib_mbs`` / ``get_1mib_mbs``: 200 objects of 1 MiB one after the other (a copier
  uploading small segments and their indexes);
- ``range_4mib_mbs``: the 64 MiB object read back in 4 MiB ranged GETs
  (rsm.config.chunk.size's default: what a remote fetch does);
- ``cpu_ms_per_mib``: the client process's CPU time (all its threads) per MiB moved over all
  the transfers above: what the library costs the broker, whatever the server's speed.

With ``--rsm``, snakka's own RemoteStorageManager instead (what the copier and the remote
reader get, checksums included), on both backends: ``copy_mbs`` (one 64 MiB segment and its
small index files, manifest last) and ``fetch_mbs`` (the segment read back in
``rsm.config.chunk.size`` pieces, every chunk CRC32C-verified), through the loopback S3 server
and through a local directory.

Each number is the best of ``--repeat`` runs. The loopback server is itself Python, so the
MB/s are a floor shared by both; the differences are the client's own costs.

    PYTHONPATH=src .venv/bin/python bench/bench_object_store.py [--repeat 2] [--json] [--rsm]

Needs ``moto[s3]`` with flask and flask-cors, ``obstore`` and ``boto3`` (the ``test`` extra has them).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MIB = 1 << 20
BIG = 64 * MIB
SMALL = MIB
SMALL_COUNT = 200
RANGE = 4 * MIB
PART = 25 * MIB
PART_CONCURRENCY = 2
BUCKET = "bench"
LIBRARIES = ("obstore", "boto3")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the moto server did not start") from None
            time.sleep(0.1)


# ------------------------------------------------------------------ one library, one process


class _Obstore:
    def __init__(self, endpoint: str) -> None:
        import obstore
        from obstore.store import S3Store

        self.ob = obstore
        self.store = S3Store(
            BUCKET, endpoint=endpoint, region="us-east-1", access_key_id="x",
            secret_access_key="x", client_options={"allow_http": True},
            retry_config={"max_retries": 0})

    def put_file(self, key: str, path: str) -> None:
        from pathlib import Path
        self.ob.put(self.store, key, Path(path), chunk_size=PART,
                    max_concurrency=PART_CONCURRENCY)

    def put(self, key: str, data: bytes) -> None:
        self.ob.put(self.store, key, data, use_multipart=False)

    def get(self, key: str) -> int:
        return len(self.ob.get(self.store, key).bytes())

    def get_range(self, key: str, start: int, end: int) -> int:
        return len(self.ob.get_range(self.store, key, start=start, end=end))


class _Boto3:
    def __init__(self, endpoint: str) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.s3 = boto3.client(
            "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
            aws_secret_access_key="x",
            config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))
        self.transfer = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART,
                                       max_concurrency=PART_CONCURRENCY)

    def put_file(self, key: str, path: str) -> None:
        self.s3.upload_file(path, BUCKET, key, Config=self.transfer)

    def put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=data)

    def get(self, key: str) -> int:
        return len(self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def get_range(self, key: str, start: int, end: int) -> int:
        body = self.s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{end - 1}")
        return len(body["Body"].read())


def _mbs(nbytes: int, seconds: float) -> float:
    return round(nbytes / MIB / seconds, 1)


def _worker(lib: str, endpoint: str, repeat: int) -> dict[str, float | str]:
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    client = _Obstore(endpoint) if lib == "obstore" else _Boto3(endpoint)
    out: dict[str, float | str] = {
        "library": lib,
        "import_ms": round((time.perf_counter() - t0) * 1000, 1),
        "rss_mb": round(_rss_mb() - rss0, 1),
    }
    big = os.urandom(BIG)
    small = os.urandom(SMALL)
    best: dict[str, float] = {}

    def keep(name: str, nbytes: int, seconds: float) -> None:
        best[name] = max(best.get(name, 0.0), _mbs(nbytes, seconds))

    cpu0 = time.process_time()
    moved = 0
    with tempfile.NamedTemporaryFile() as f:
        f.write(big)
        f.flush()
        for r in range(repeat):
            moved += 3 * BIG + 2 * SMALL * SMALL_COUNT
            key = f"{lib}/{r}/big"
            t = time.perf_counter()
            client.put_file(key, f.name)
            keep("put_64mib_mbs", BIG, time.perf_counter() - t)
            t = time.perf_counter()
            assert client.get(key) == BIG
            keep("get_64mib_mbs", BIG, time.perf_counter() - t)
            t = time.perf_counter()
            got = sum(client.get_range(key, s, s + RANGE) for s in range(0, BIG, RANGE))
            assert got == BIG
            keep("range_4mib_mbs", BIG, time.perf_counter() - t)
            t = time.perf_counter()
            for i in range(SMALL_COUNT):
                client.put(f"{lib}/{r}/small-{i}", small)
            keep("put_1mib_mbs", SMALL * SMALL_COUNT, time.perf_counter() - t)
            t = time.perf_counter()
            for i in range(SMALL_COUNT):
                assert client.get(f"{lib}/{r}/small-{i}") == SMALL
            keep("get_1mib_mbs", SMALL * SMALL_COUNT, time.perf_counter() - t)
    out.update(best)
    out["cpu_ms_per_mib"] = round((time.process_time() - cpu0) * 1000 / (moved / MIB), 2)
    return out


# ------------------------------------------------------------------ snakka's RSM


def _rsm_rows(endpoint: str, repeat: int) -> list[dict[str, float | str]]:
    import uuid

    from snakka.remote.storage import create_remote_storage
    from snakka.remote.types import (
        LogSegmentData,
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        TopicIdPartition,
    )

    tp = TopicIdPartition(uuid.uuid4(), "bench", 0)
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for name, size in (("log", BIG), ("index", 64 << 10), ("timeindex", 96 << 10),
                           ("snapshot", 100)):
            files[name] = os.path.join(d, f"00000000000000000000.{name}")
            with open(files[name], "wb") as f:
                f.write(os.urandom(size))
        data = LogSegmentData(files["log"], files["index"], files["timeindex"], None,
                              files["snapshot"], b"0\n1\n0 0\n")
        backends: list[tuple[str, dict[str, object]]] = [
            ("local", {"rsm.config.storage.backend": "local",
                       "rsm.config.storage.root": os.path.join(d, "remote")}),
            ("s3", {"rsm.config.storage.backend": "s3",
                    "rsm.config.storage.s3.bucket.name": BUCKET,
                    "rsm.config.storage.s3.endpoint.url": endpoint,
                    "rsm.config.storage.s3.path.style.access.enabled": True,
                    "rsm.config.storage.aws.access.key.id": "x",
                    "rsm.config.storage.aws.secret.access.key": "x"}),
        ]
        for name, configs in backends:
            rsm = create_remote_storage(configs)
            copy_best = fetch_best = 0.0
            for _ in range(repeat):
                md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), 0, 999, 0, 0, 0,
                                              BIG, ((0, 0),))
                t = time.perf_counter()
                rsm.copy_log_segment_data(md, data)
                copy_best = max(copy_best, _mbs(BIG, time.perf_counter() - t))
                t = time.perf_counter()
                got = sum(len(rsm.fetch_log_segment(md, s, s + rsm.chunk_size))
                          for s in range(0, BIG, rsm.chunk_size))
                assert got == BIG
                fetch_best = max(fetch_best, _mbs(BIG, time.perf_counter() - t))
                rsm.delete_log_segment_data(md)
            rsm.close()
            rows.append({"backend": name, "copy_mbs": copy_best, "fetch_mbs": fetch_best})
    return rows


# ------------------------------------------------------------------ driver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object per row")
    ap.add_argument("--rsm", action="store_true",
                    help="measure snakka's RemoteStorageManager on both backends instead")
    ap.add_argument("--worker", choices=LIBRARIES, help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.endpoint, args.repeat)))
        return

    proc, endpoint = _start_server()
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"),
                               timeout=10).close()
        rows = _rsm_rows(endpoint, args.repeat) if args.rsm else []
        for lib in () if args.rsm else LIBRARIES:
            res = subprocess.run(
                [sys.executable, __file__, "--worker", lib, "--endpoint", endpoint,
                 "--repeat", str(args.repeat)],
                capture_output=True, text=True, timeout=600)
            if res.returncode:
                sys.exit(f"{lib} failed:\n{res.stderr}")
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    finally:
        proc.terminate()
        proc.wait(10)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")


if __name__ == "__main__":
    main()
