"""Screenshots of every page of the web console, for docs/console.md (docs/console/*.png).

Starts an in-process broker with the console on (and the StandardAuthorizer, the console's
User:ANONYMOUS a super user), writes sample data with confluent-kafka (topics, a consumer group
with lag, a share group with a member holding records, ACLs, SCRAM users, a per-broker
config), client quotas and a cluster-wide broker config default through the console's forms,
keeps a trickle of traffic going so the live charts have something to draw, and saves one PNG
per page from headless Chromium (Debian's chromium + chromium-driver, as the browser tests),
shrunk with pngquant when it is installed.

    .venv/bin/python tools/console_screenshots.py [--out docs/console]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from console.browser import chromium, console_errors, skip_reason  # noqa: E402
from console.support import Http, consume, create_topic, produce  # noqa: E402

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
    ("acls", "acls"),
    ("users", "users"),
    ("quotas", "quotas"),
    ("broker", "broker?dynamic=1"),
]

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _security_samples(bs: str, console_url: str) -> None:
    """ACLs and SCRAM users (confluent-kafka), client quotas (the console's form)."""
    admin = AdminClient({"bootstrap.servers": bs})
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    acls = [
        AclBinding(ResourceType.TOPIC, "orders", lit, "User:billing", "*", AclOperation.READ,
                   allow),
        AclBinding(ResourceType.GROUP, "billing", lit, "User:billing", "*", AclOperation.READ,
                   allow),
        AclBinding(ResourceType.TOPIC, "clicks", pre, "User:analytics", "*",
                   AclOperation.READ, allow),
        AclBinding(ResourceType.TOPIC, "payments", lit, "User:analytics", "*",
                   AclOperation.ALL, deny),
        AclBinding(ResourceType.TOPIC, "orders", lit, "User:shop", "10.0.0.7",
                   AclOperation.WRITE, allow),
        AclBinding(ResourceType.BROKER, "kafka-cluster", lit, "User:ops", "*",
                   AclOperation.ALTER, allow),
    ]
    for f in admin.create_acls(acls).values():
        f.result(timeout=30)
    ups = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iters), pw.encode())
           for user, mech, iters, pw in (
               ("billing", ScramMechanism.SCRAM_SHA_256, 4096, "billing-pw"),
               ("analytics", ScramMechanism.SCRAM_SHA_512, 8192, "analytics-pw"),
               ("ops", ScramMechanism.SCRAM_SHA_256, 4096, "ops-pw"),
               ("ops", ScramMechanism.SCRAM_SHA_512, 4096, "ops-pw"))]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(timeout=30)
    http = Http(console_url)
    for etype, name, key, value in (("user", "analytics", "consumer_byte_rate", "10485760"),
                                    ("user", "", "producer_byte_rate", "5242880"),
                                    ("client-id", "batch-loader", "request_percentage", "50")):
        status, _h, body = http.post("/quotas/alter", {
            "entity_type": etype, "entity_name": name, "key": key, "value": value},
            page="/quotas")
        assert status == 303, body[:200]
    # Broker configs: a cluster-wide default (the console's form), one broker's own value
    # (confluent-kafka names the broker by its node id).
    status, _h, body = http.post("/broker/config", {
        "scope": "default", "key": "log.retention.ms", "value": "259200000"}, page="/broker")
    assert status == 303, body[:200]
    node = str(http.json("/api/broker")["node_id"])
    for f in admin.incremental_alter_configs([ConfigResource(
            ResourceType.BROKER, node, incremental_configs=[ConfigEntry(
                "log.roll.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])]
            ).values():
        f.result(timeout=30)


def _shrink(path: Path) -> None:
    """pngquant in place, when it is installed (the PNGs live in the repository)."""
    if shutil.which("pngquant"):
        subprocess.run(["pngquant", "--force", "--skip-if-larger", "--strip", "--quality",
                        "70-95", "--output", str(path), str(path)], check=False)


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
    with EmbeddedBroker(config={"console.port": "0", "authorizer.class.name": STANDARD,
                                "super.users": "User:ANONYMOUS"}) as b:
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
        _security_samples(bs, b.console_url)
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
                    _shrink(out / f"{name}.png")
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
