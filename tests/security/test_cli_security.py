"""The ``snakka`` CLI against a SASL_SSL broker (issue 14, item 4): one client-config
mechanism (``--command-config FILE`` and ``-X key=value``) drives TLS and SASL for every verb
that talks to a broker: topics, produce, consume, groups and users, each run as a real
subprocess. A missing, unreadable or malformed --command-config, or a config our client cannot
use, is one clean error line and a non-zero exit.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from snakka.testing import EmbeddedBroker

from .certs import TlsMaterial

pytestmark = pytest.mark.timeout(300)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
CLI = [sys.executable, "-m", "snakka"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory, tls: TlsMaterial) -> Iterator[EmbeddedBroker]:
    cfg = {"listeners": "SASL_SSL://localhost:0",
           "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", "sasl.jaas.config": PLAIN_JAAS,
           "connection.failed.authentication.delay.ms": "20", **tls.broker_config(),
           # ACLs on (test_acls_over_sasl_ssl); resources nobody has ACLs for stay open.
           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin", "allow.everyone.if.no.acl.found": "true"}
    with EmbeddedBroker(str(tmp_path_factory.mktemp("cli-sasl-ssl")), config=cfg,
                        log_level="INFO") as b:
        yield b


def write_props(path: Path, tls: TlsMaterial, mechanism: str, user: str, password: str) -> Path:
    module = "scram.ScramLoginModule" if mechanism.startswith("SCRAM") else \
        "plain.PlainLoginModule"
    path.write_text(
        "# Java client properties, as kafka-*.sh --command-config reads them\n"
        "security.protocol=SASL_SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={tls.ca}\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n"
        f'    username="{user}" password="{password}";\n')
    return path


def cli(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([*CLI, *args], input=input, capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in r.stderr
    return lines[0]


def test_every_verb_over_sasl_ssl(broker, tls, tmp_path):
    bs = broker.bootstrap_servers
    admin = write_props(tmp_path / "admin.properties", tls, "PLAIN", "admin", "admin-secret")
    # users add/list: the first SCRAM user, made by the PLAIN admin over TLS.
    cli("users", "add", "carol", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
        "--password", "carol-pw", "-b", bs, "--command-config", str(admin))
    listed = cli("users", "list", "-b", bs, "--command-config", str(admin)).stdout
    assert "carol\tSCRAM-SHA-512(iterations=8192)" in listed

    # From here on carol, over SCRAM-SHA-512: a file, or the same as -X (librdkafka's names).
    carol = ["-b", bs, "--command-config",
             str(write_props(tmp_path / "carol.properties", tls, "SCRAM-SHA-512", "carol",
                             "carol-pw"))]
    carol_x = ["-b", bs, "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={tls.ca}",
               "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=carol",
               "-X", "sasl.password=carol-pw"]
    cli("topics", "create", "cli-sec", "--partitions", "2", *carol)
    assert "cli-sec" in cli("topics", "list", *carol_x).stdout.split()
    assert "cli-sec" in cli("topics", "describe", "cli-sec", *carol).stdout

    lines = [f"k{i}:v{i}" for i in range(50)]
    r = cli("produce", "cli-sec", "--key-separator", ":", *carol, input="\n".join(lines) + "\n")
    assert "Produced 50 record(s)" in r.stderr
    r = cli("consume", "cli-sec", "--from-beginning", "-n", "50", "--print-key",
            "-g", "cli-readers", *carol_x)
    got = sorted(r.stdout.splitlines())
    assert got == sorted(f"k{i}\tv{i}" for i in range(50))

    groups = cli("groups", "list", *carol).stdout
    assert "cli-readers" in groups
    assert "cli-sec" in cli("groups", "describe", "cli-readers", *carol).stdout
    # -X wins over the file: a wrong password given with -X fails, naming the failure.
    r = cli("topics", "list", *carol, "-X", "sasl.password=wrong", check=False)
    line = one_error_line(r)
    assert "Authentication failed" in line or "authentication" in line.lower(), line


def test_bad_command_config_is_one_clean_line(broker, tls, tmp_path):
    bs = broker.bootstrap_servers
    missing = one_error_line(cli("topics", "list", "-b", bs, "--command-config",
                                 str(tmp_path / "nope.properties"), check=False))
    assert "nope.properties" in missing and "No such file" in missing

    one_error_line(cli("users", "list", "-b", bs, "--command-config", str(tmp_path),
                       check=False))  # a directory

    garbage = tmp_path / "garbage.properties"
    garbage.write_bytes(b"\x00\xff\xfe binary \x80\n")
    assert "garbage.properties" in one_error_line(
        cli("produce", "t", "-b", bs, "--command-config", str(garbage), input="x\n",
            check=False))

    not_props = tmp_path / "notprops.txt"
    not_props.write_text("just some words\nsecurity\n")
    assert "not a properties file" in one_error_line(
        cli("groups", "list", "-b", bs, "--command-config", str(not_props), check=False))

    # Well-formed, but values our client cannot use: named in the one line.
    gssapi = tmp_path / "gssapi.properties"
    gssapi.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    line = one_error_line(cli("consume", "t", "-b", bs, "--command-config", str(gssapi),
                              check=False))
    assert "sasl.mechanism" in line and "GSSAPI" in line and "gssapi.properties" in line
    line = one_error_line(cli("topics", "list", "-b", bs, "-X", "security.protocol=SASL_SSL",
                              "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=admin",
                              "-X", "sasl.password=admin-secret", "-X",
                              "ssl.truststore.location=/no/such/ca.pem", "-X",
                              "ssl.truststore.type=PEM", check=False))
    assert "ssl.truststore.location" in line


def test_acls_over_sasl_ssl(broker, tls, tmp_path):
    """`snakka acls add|list|remove` as the super user over SASL_SSL, and what they do to
    another user: an ACL that allows dave only Describe on his topic denies his produce."""
    bs = broker.bootstrap_servers
    admin = ["-b", bs, "--command-config",
             str(write_props(tmp_path / "admin.properties", tls, "PLAIN", "admin", "admin-secret"))]
    cli("users", "add", "dave", "--password", "dave-pw", *admin)
    dave = ["-b", bs, "--command-config",
            str(write_props(tmp_path / "dave.properties", tls, "SCRAM-SHA-512", "dave", "dave-pw"))]
    cli("topics", "create", "dave-acl", *dave)
    assert "Produced 1 record(s)" in cli("produce", "dave-acl", *dave, input="a\n").stderr

    acl = ["--allow-principal", "User:dave", "--operation", "Describe", "--topic", "dave-acl"]
    cli("acls", "add", *acl, *admin)
    listed = cli("acls", "list", "--topic", "dave-acl", *admin).stdout
    assert "User:dave" in listed and "DESCRIBE" in listed.upper(), listed
    r = cli("produce", "dave-acl", *dave, input="b\n", check=False)
    assert r.returncode != 0 and "TOPIC_AUTHORIZATION_FAILED" in r.stdout + r.stderr, r
    assert "dave-acl" in cli("topics", "list", *dave).stdout.split()  # Describe allowed

    cli("acls", "remove", *acl, *admin)
    assert "User:dave" not in cli("acls", "list", "--topic", "dave-acl", *admin).stdout
    assert "Produced 1 record(s)" in cli("produce", "dave-acl", *dave, input="c\n").stderr
