"""The ``snakka`` data source over SASL_SSL (issue 14, item 4): Spark's Kafka connector options
(``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``) reach every connection the driver and the executors open.

One broker with a SASL_SSL listener (certificates from tests/security/certs.py; SCRAM-SHA-512
users created over PLAIN by an admin). A batch read, a streaming read (AvailableNow) and a
write move records exactly; read_committed works with the security options; a wrong password
fails with the broker's message within the connection timeout; an unsupported option value is
refused on the driver before any Spark job starts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from snakka.client.admin import Admin
from snakka.testing import EmbeddedBroker
from tests.integration.helpers import run_async
from tests.security.certs import TlsMaterial, make_material

pytestmark = pytest.mark.timeout(300)

ERRORS = (PySparkException, Py4JJavaError)
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
SCRAM_USER, SCRAM_PASSWORD = "spark-reader", "Sp4rk-secret"


def scram_jaas(user: str, password: str) -> str:
    return ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{user}" password="{password}";')


class SecuredBroker:
    def __init__(self, broker: EmbeddedBroker, tls: TlsMaterial) -> None:
        self.broker, self.tls = broker, tls
        self.bootstrap = broker.bootstrap_servers

    def kafka_config(self, user: str = SCRAM_USER, password: str = SCRAM_PASSWORD,
                     mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """Kafka client configs (Java names) for ``user``."""
        jaas = scram_jaas(user, password) if mechanism.startswith("SCRAM") else (
            'org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{user}" password="{password}";')
        return {"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.tls.ca), "sasl.mechanism": mechanism,
                "sasl.jaas.config": jaas}

    def spark_options(self, **kw: str) -> dict[str, str]:
        """The same as Spark's Kafka connector options."""
        return {"kafka.bootstrap.servers": self.bootstrap,
                **{f"kafka.{k}": v for k, v in self.kafka_config(**kw).items()}}

    def librdkafka(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.tls.ca), "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD}

    def create_topic(self, name: str, partitions: int) -> str:
        async def go() -> None:
            async with Admin(self.bootstrap, config=self.kafka_config()) as admin:
                await admin.create_topic(name, partitions)
        run_async(go())
        return name


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[SecuredBroker]:
    tls = make_material(tmp_path_factory.mktemp("spark-tls"))
    cfg = {"listeners": "SASL_SSL://localhost:0",
           "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", "sasl.jaas.config": PLAIN_JAAS,
           "connection.failed.authentication.delay.ms": "20", **tls.broker_config()}
    with EmbeddedBroker(str(tmp_path_factory.mktemp("spark-sasl-ssl")), config=cfg,
                        log_level="INFO") as broker:
        s = SecuredBroker(broker, tls)

        async def add_user() -> None:  # the first SCRAM user, by the PLAIN admin
            async with Admin(s.bootstrap, config=s.kafka_config(
                    "admin", "admin-secret", mechanism="PLAIN")) as admin:
                await admin.upsert_user(SCRAM_USER, "SCRAM-SHA-512", SCRAM_PASSWORD, 8192)
        run_async(add_user())
        yield s


def produce(secured: SecuredBroker, topic: str, values: list[bytes], partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({**secured.librdkafka(), "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=v, partition=i % partitions)
    assert p.flush(60) == 0


def reader(spark, options: dict[str, str]):
    r = spark.read.format("snakka")
    for k, v in options.items():
        r = r.option(k, v)
    return r


def test_batch_stream_and_write_over_sasl_ssl(spark, secured, tmp_path):
    topic = secured.create_topic("spark-sec-in", 3)
    values = [b"rec-%04d" % i for i in range(900)]
    produce(secured, topic, values, 3)
    opts = secured.spark_options()

    # Batch read: every record exactly once.
    got = [bytes(r.value) for r in reader(spark, {**opts, "subscribe": topic}).load()
           .select("value").collect()]
    assert sorted(got) == values

    # Streaming read, AvailableNow, several micro-batches (the driver's client plans them,
    # the executors read).
    sq = (spark.readStream.format("snakka").options(**opts).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400").load()
          .select("value").writeStream.format("parquet").option("path", str(tmp_path / "out"))
          .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
          .start())
    assert sq.awaitTermination(180)
    assert sq.exception() is None, sq.exception()
    sizes = [p["numInputRows"] for p in sq.recentProgress if p["numInputRows"]]
    assert len(sizes) == 3 and max(sizes) <= 400 and sum(sizes) == len(values), sizes
    streamed = [bytes(r.value) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(streamed) == values

    # Write (idempotent producer, two tasks), read back by confluent-kafka over SASL_SSL.
    out_topic = secured.create_topic("spark-sec-out", 2)
    df = spark.createDataFrame([(v, v) for v in values], "key binary, value binary")
    (df.repartition(2).write.format("snakka").options(**opts).option("topic", out_topic)
     .mode("append").save())
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**secured.librdkafka(), "group.id": "check", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(out_topic, p, 0) for p in range(2)])
        back: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(back) < len(values) and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                back.append(m.value())
        assert sorted(back) == values
        assert c.poll(0.5) is None  # nothing more: exactly once
    finally:
        c.close()

    # And the snakka source reads the written topic back, read_committed, security options on.
    got = [bytes(r.value) for r in reader(spark, {**opts, "subscribe": out_topic,
                                                  "kafka.isolation.level": "read_committed"})
           .load().select("value").collect()]
    assert sorted(got) == values


def test_read_committed_over_sasl_ssl(spark, secured):
    from confluent_kafka import Producer

    topic = secured.create_topic("spark-sec-txn", 1)
    p = Producer({**secured.librdkafka(), "transactional.id": "spark-sec-tx"})
    p.init_transactions(30)
    for commit in (True, False, True):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=b"%s-%d" % (b"c" if commit else b"a", i))
        assert p.flush(30) == 0
        (p.commit_transaction if commit else p.abort_transaction)(30)
    opts = {**secured.spark_options(), "subscribe": topic}
    committed = [bytes(r.value) for r in reader(
        spark, {**opts, "kafka.isolation.level": "read_committed"}).load().collect()]
    assert sorted(committed) == sorted([b"c-%d" % i for i in range(5)] * 2)
    everything = [bytes(r.value) for r in reader(spark, opts).load().collect()]
    assert len(everything) == 15


def test_wrong_password_fails_clearly_and_in_time(spark, secured):
    topic = secured.create_topic("spark-sec-badpw", 1)
    opts = {**secured.spark_options(password="wrong"),
            "kafka.socket.connection.setup.timeout.ms": "5000"}
    t0 = time.monotonic()
    with pytest.raises(ERRORS) as e:
        reader(spark, {**opts, "subscribe": topic}).load().count()
    text = str(e.value)
    assert f"SASL authentication with Kafka broker {secured.bootstrap} failed" in text, text[:3000]
    assert "kafka.sasl.mechanism=SCRAM-SHA-512" in text
    assert "wrong" not in text.split("SASL authentication", 1)[1][:400]  # no password echoed
    assert time.monotonic() - t0 < 30

    # The write path says the same.
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(ERRORS) as e:
        df.write.format("snakka").options(**opts).option("topic", topic).mode("append").save()
    assert "SASL authentication with Kafka broker" in str(e.value)


def test_untrusted_broker_certificate_fails_clearly(spark, secured, tmp_path):
    topic = secured.create_topic("spark-sec-untrusted", 1)
    other = make_material(tmp_path / "other")  # another CA: the broker is not trusted
    opts = {**secured.spark_options(), "subscribe": topic,
            "kafka.ssl.truststore.location": str(other.ca)}
    with pytest.raises(ERRORS) as e:
        reader(spark, opts).load().count()
    assert "TLS handshake with Kafka broker" in str(e.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)


@pytest.mark.parametrize("extra, message", [
    ({"kafka.sasl.mechanism": "GSSAPI"},
     "option 'kafka.sasl.mechanism' = GSSAPI (Kerberos) is not supported"),
    ({"kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required "
                                "useKeyTab=true;"},
     "option 'kafka.sasl.jaas.config': com.sun.security.auth.module.Krb5LoginModule"),
    ({"kafka.ssl.truststore.type": "JKS"}, "option 'kafka.ssl.truststore.location' is invalid"),
    ({"kafka.sasl.kerberos.service.name": "kafka"},
     "'kafka.sasl.kerberos.service.name' is not supported"),
    ({"kafka.security.protocol": "SASL_TLS"}, "option 'kafka.security.protocol' must be one of"),
])
def test_unsupported_option_refused_before_any_job(spark, secured, tmp_path, extra, message):
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)  # a real (Java) JKS file's magic
    if extra.get("kafka.ssl.truststore.type") == "JKS":
        extra = {**extra, "kafka.ssl.truststore.location": str(jks)}
    sc = spark.sparkContext
    group = f"refused-{abs(hash(message))}"
    sc.setJobGroup(group, "an option that must be refused before any job")
    try:
        for action in (
            lambda: reader(spark, {**secured.spark_options(), **extra, "subscribe": "t"})
            .load().count(),
            lambda: spark.createDataFrame([(b"v",)], "value binary").write.format("snakka")
            .options(**{**secured.spark_options(), **extra}).option("topic", "t")
            .mode("append").save(),
        ):
            with pytest.raises(ERRORS) as e:
                action()
            assert message in str(e.value), str(e.value)[:3000]
        if extra.get("kafka.ssl.truststore.type") == "JKS":
            assert "keytool -importkeystore" in str(e.value)
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
    finally:
        sc.setJobGroup("", "")
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
