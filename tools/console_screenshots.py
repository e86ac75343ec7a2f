"""Screenshots of every page of the web console, for docs/console.md (docs/console/*.png).

Starts an in-process broker with the console on, writes sample data with confluent-kafka
(topics, a consumer group with lag, a share group with a member holding records), keeps a
trickle of traffic going so the live charts have something to draw, and saves one PNG per page
from headless Chromium (Debian's chromium + chromium-driver, as the browser tests).

    .venv/bin/python tools/console_screenshots.py [--out docs/console]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from console.browser import chromium, console_errors, skip_reason  # noqa: E402
from console.support import consume, create_topic, produce  # noqa: E402

from snakka.client import ShareConsumer  # noqa: E402
from snakka.testing import EmbeddedBroker  # noqa: E402

PAGES = [
    ("overview", ""),
    ("topics", "topics"),
    ("topic", "topics/orders"),
    ("messages", "topics/orders/messages?partition=0&limit=12"),
    ("groups", "groups"),
    ("group", "groups/billing"),
    ("share-groups", "share-groups"),
    ("share-group", "share-groups/workers"),
]


def _traffic(bs: str, stop: threading.Event) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20})
    i = 0
    while not stop.is_set():
        for _ in range(40 + (i % 7) * 15):
            p.produce("clicks", key=f"user-{i % 50}".encode(),
                      value=b'{"page": "/checkout", "ms": %d}' % (i % 900))
            i += 1
        p.poll(0)
        stop.wait(0.25)
    p.flush(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "console"))
    ap.add_argument("--seconds", type=float, default=12.0,
                    help="traffic before the overview is taken (the charts' history)")
    args = ap.parse_args()
    reason = skip_reason()
    if reason:
        print(f"cannot take screenshots: {reason}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with EmbeddedBroker(config={"console.port": "0"}) as b:
        bs = b.bootstrap_servers
        create_topic(bs, "orders", 3, {"retention.ms": "259200000"})
        create_topic(bs, "clicks", 6)
        create_topic(bs, "payments", 2, {"cleanup.policy": "compact"})
        create_topic(bs, "jobs", 2)
        produce(bs, "orders", 300)
        produce(bs, "payments", 40, prefix="pay-")
        consume(bs, "orders", "billing", 300)
        produce(bs, "orders", 75)  # billing now lags by 75
        consume(bs, "payments", "ledger", 40)
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.incremental_alter_configs([ConfigResource(
                ResourceType.GROUP, "workers", incremental_configs=[ConfigEntry(
                    "share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(timeout=30)
        produce(bs, "jobs", 60, prefix="job-")
        share = ShareConsumer({"bootstrap.servers": bs, "group.id": "workers",
                               "share.acknowledgement.mode": "explicit",
                               "max.poll.records": "40", "client.id": "worker-1"})
        share.subscribe(["jobs"])
        got: list = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:  # one poll: explicit mode acks it
            got.extend(share.poll(0.5))
        for r in got[:20]:
            share.acknowledge(r)
        share.commit_sync()
        stop = threading.Event()
        t = threading.Thread(target=_traffic, args=(bs, stop), daemon=True)
        t.start()
        time.sleep(args.seconds)  # the charts' history: real traffic over real time
        try:
            with chromium(1280, 800) as d:
                for name, path in PAGES:
                    d.get(b.console_url + path)
                    if name == "overview":
                        time.sleep(2.5)  # one chart poll after load
                    height = d.execute_script("return document.documentElement.scrollHeight")
                    d.set_window_size(1280, min(max(800, height + 20), 2400))
                    d.save_screenshot(str(out / f"{name}.png"))
                    d.set_window_size(1280, 800)
                    errors = console_errors(d)
                    print(f"{name}: {out / f'{name}.png'}"
                          + (f" CONSOLE ERRORS: {errors}" if errors else ""))
        finally:
            stop.set()
            t.join(10)
            share.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
