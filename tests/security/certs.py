"""Test certificates for TLS: a small CA, a broker certificate, client certificates.

Generated with the ``cryptography`` library into a directory (no network, no openssl binary),
once per test session through the ``tls`` fixture of tests/security/conftest.py; other security
tests (SASL_SSL, ACLs with mTLS principals) reuse it. Everything is an ordinary file a client
library can be pointed at:

==========================  ================================================================
``TlsMaterial`` attribute    what it is
==========================  ================================================================
``ca``                       the test CA's certificate (PEM): every client's trust store
``server_keystore``          the broker's PEM key store: its private key, then its certificate
                             (SAN localhost, 127.0.0.1, ::1) and the CA (Kafka's PEM layout)
``server_cert``/``server_key``  the same key and certificate as separate PEM files
``server_p12``               the broker's key store as PKCS12 (password ``TlsMaterial.password``)
``truststore_p12``           the CA as a PKCS12 trust store (same password)
``clients[name]``            a :class:`ClientCert` per client: ``alice`` and ``bob`` (signed by
                             the CA), ``expired`` (CA-signed, validity in the past) and
                             ``rogue`` (signed by another CA the broker does not trust)
==========================  ================================================================

Each client certificate's subject is ``CN=<name>,OU=eng,O=Example,C=NO`` (RFC 2253, as Java and
security/ssl.py print it: ``ClientCert.dn``).

Use :func:`make_material` directly for one-off sets (``make_material(tmp_path)``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "test-secret"
_ONE_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class ClientCert:
    """A client's certificate and key as PEM files (``keystore``: key + chain, Kafka's PEM
    key store layout), and its subject as Java prints it."""

    name: str
    cert: Path
    key: Path
    keystore: Path
    dn: str


@dataclass(frozen=True)
class TlsMaterial:
    directory: Path
    ca: Path
    server_keystore: Path
    server_cert: Path
    server_key: Path
    server_p12: Path
    truststore_p12: Path
    password: str = PASSWORD
    clients: dict[str, ClientCert] = field(default_factory=dict)

    def broker_config(self, *, client_auth: str = "none", prefix: str = "") -> dict[str, str]:
        """Broker configs for a PEM key store (and the CA as trust store when clients
        authenticate); ``prefix`` e.g. ``listener.name.ssl.`` for one listener only."""
        cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.server_keystore),
               "ssl.client.auth": client_auth}
        if client_auth != "none":
            cfg |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)}
        return {prefix + k: v for k, v in cfg.items()}


def _name(cn: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "NO"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, cn),
    ])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _ONE_DAY).not_valid_after(now + 30 * _ONE_DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(cn: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *,
          server: bool, expired: bool = False
          ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    start, end = ((now - 10 * _ONE_DAY, now - 5 * _ONE_DAY) if expired
                  else (now - _ONE_DAY, now + 30 * _ONE_DAY))
    b = (x509.CertificateBuilder()
         .subject_name(_name(cn)).issuer_name(ca.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(start).not_valid_after(end)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                        critical=False)
         .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                               else ExtendedKeyUsageOID.CLIENT_AUTH]),
                        critical=False))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]), critical=False)
    return b.sign(ca_key, hashes.SHA256()), key


def _pem_cert(c: x509.Certificate) -> bytes:
    return c.public_bytes(serialization.Encoding.PEM)


def _pem_key(k: ec.EllipticCurvePrivateKey) -> bytes:
    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def make_material(directory: Path) -> TlsMaterial:
    """Generate every file into ``directory`` (created if missing)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("snakka-test-ca")
    other_ca, other_key = _ca("rogue-ca")
    (d / "ca.pem").write_bytes(_pem_cert(ca))

    srv, srv_key = _leaf("localhost", ca, ca_key, server=True)
    (d / "server.pem").write_bytes(_pem_cert(srv))
    (d / "server.key").write_bytes(_pem_key(srv_key))
    (d / "server.keystore.pem").write_bytes(_pem_key(srv_key) + _pem_cert(srv) + _pem_cert(ca))
    enc = serialization.BestAvailableEncryption(PASSWORD.encode())
    (d / "server.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"localhost", srv_key, srv, [ca], enc))
    (d / "truststore.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca], enc))

    clients: dict[str, ClientCert] = {}
    for name, signer, expired in (("alice", (ca, ca_key), False), ("bob", (ca, ca_key), False),
                                  ("expired", (ca, ca_key), True),
                                  ("rogue", (other_ca, other_key), False)):
        cert, key = _leaf(name, *signer, server=False, expired=expired)
        chain = _pem_cert(cert) + _pem_cert(signer[0])
        (d / f"{name}.pem").write_bytes(chain)
        (d / f"{name}.key").write_bytes(_pem_key(key))
        (d / f"{name}.keystore.pem").write_bytes(_pem_key(key) + chain)
        clients[name] = ClientCert(name, d / f"{name}.pem", d / f"{name}.key",
                                   d / f"{name}.keystore.pem", f"CN={name},OU=eng,O=Example,C=NO")
    return TlsMaterial(d, d / "ca.pem", d / "server.keystore.pem", d / "server.pem",
                       d / "server.key", d / "server.p12", d / "truststore.p12",
                       clients=clients)


@dataclass(frozen=True)
class RotationMaterial:
    """Key stores for certificate reload tests (tests/security/test_tls_reload.py), all from
    one CA (``ca``): ``a`` and ``b`` are two server certificates with the same subject and SAN
    (a rotation Kafka accepts), ``other_dn`` has another subject, ``fewer_sans`` drops ::1 from
    the SAN, ``mismatched`` pairs b's certificate with a's key, ``garbage`` is not PEM.
    ``serials`` maps each name to its certificate's serial number."""

    directory: Path
    ca: Path
    a: Path
    b: Path
    other_dn: Path
    fewer_sans: Path
    mismatched: Path
    garbage: Path
    serials: dict[str, int]


def make_rotation_material(directory: Path) -> RotationMaterial:
    """Generate the reload test key stores into ``directory`` (PEM: key, certificate, CA)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("snakka-rotation-ca")
    (d / "rotation-ca.pem").write_bytes(_pem_cert(ca))
    serials: dict[str, int] = {}
    keys = {}
    certs = {}
    for name, cn in (("a", "localhost"), ("b", "localhost"), ("other_dn", "other-host")):
        cert, key = _leaf(cn, ca, ca_key, server=True)
        certs[name], keys[name] = cert, key
        serials[name] = cert.serial_number
        (d / f"{name}.keystore.pem").write_bytes(_pem_key(key) + _pem_cert(cert) + _pem_cert(ca))
    # Same subject, a SAN without ::1.
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    fewer = (x509.CertificateBuilder()
             .subject_name(_name("localhost")).issuer_name(ca.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - _ONE_DAY).not_valid_after(now + 30 * _ONE_DAY)
             .add_extension(x509.SubjectAlternativeName([
                 x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                 critical=False)
             .sign(ca_key, hashes.SHA256()))
    serials["fewer_sans"] = fewer.serial_number
    (d / "fewer_sans.keystore.pem").write_bytes(_pem_key(key) + _pem_cert(fewer) + _pem_cert(ca))
    (d / "mismatched.keystore.pem").write_bytes(
        _pem_key(keys["a"]) + _pem_cert(certs["b"]) + _pem_cert(ca))
    (d / "garbage.keystore.pem").write_bytes(b"this is not a key store\n")
    return RotationMaterial(d, d / "rotation-ca.pem", d / "a.keystore.pem", d / "b.keystore.pem",
                            d / "other_dn.keystore.pem", d / "fewer_sans.keystore.pem",
                            d / "mismatched.keystore.pem", d / "garbage.keystore.pem", serials)
