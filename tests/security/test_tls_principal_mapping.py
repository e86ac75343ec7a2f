"""ssl.principal.mapping.rules: Kafka's SslPrincipalMapper semantics (the examples of Kafka's
documentation and its SslPrincipalMapperTest), and the RFC 2253 subject of a certificate."""

from __future__ import annotations

import pytest

from snakka.config import BrokerConfig, ConfigError
from snakka.security.principal import ANONYMOUS, KafkaPrincipal
from snakka.security.ssl import (
    NoMatchingRule,
    SslPrincipalMapper,
    principal_from_certificate,
    rfc2253_name,
)

# Kafka's documented example set (docs/security.html, "Customizing SSL User Name").
DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
             "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
             "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
             "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
             "DEFAULT")


@pytest.mark.parametrize("dn,name", [
    ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
    ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
    ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
    ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_documented_rules(dn: str, name: str) -> None:
    assert SslPrincipalMapper.from_rules(DOC_RULES).get_name(dn) == name


def test_default_is_the_whole_dn() -> None:
    dn = "CN=alice,OU=eng,O=Example,C=NO"
    assert SslPrincipalMapper.from_rules("DEFAULT").get_name(dn) == dn
    assert SslPrincipalMapper.from_rules(None).get_name(dn) == dn


def test_rules_with_whitespace_and_newlines() -> None:
    rules = "  RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/ ,\n  DEFAULT  "
    m = SslPrincipalMapper.from_rules(rules)
    assert m.get_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "Duke"
    assert m.get_name("CN=Duke,OU=Other") == "CN=Duke,OU=Other"


def test_escaped_comma_in_a_name() -> None:
    # Kafka's testCommaWithWhitespace: an escaped comma belongs to the CN.
    m = SslPrincipalMapper.from_rules(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert m.get_name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_escaped_slash_in_pattern_and_replacement() -> None:
    m = SslPrincipalMapper.from_rules(r"RULE:^CN=(.*?),O=a\/b$/$1\/x/")
    assert m.get_name("CN=z,O=a/b") == "z/x"


def test_back_reference_beyond_the_groups_is_literal() -> None:
    # Kafka (after NiFi): $4 with three groups is the text "$4"; $12 with two groups is
    # group 1 followed by "2".
    m = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1-$4/")
    assert m.get_name("CN=a,OU=b,O=c") == "a-$4"
    m = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=(.*?)$/$12/")
    assert m.get_name("CN=a,OU=b") == "a2"


def test_no_matching_rule_fails() -> None:
    m = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRule):
        m.get_name("CN=Duke,OU=Other")


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str) -> None:
    # Kafka's SslPrincipalMapperTest.testInvalidRules
    with pytest.raises(ValueError):
        SslPrincipalMapper.from_rules(rules)


def test_invalid_rules_refuse_the_config() -> None:
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        BrokerConfig({"ssl.principal.mapping.rules": "RULE:^CN=(.*?)$/$1/LU"})
    with pytest.raises(ConfigError, match="listener.name.ssl.ssl.principal.mapping.rules"):
        BrokerConfig({"listener.name.ssl.ssl.principal.mapping.rules": "DEFAUL"})


def test_certificate_subject_and_principal(tls) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    pem = tls.clients["alice"].cert.read_bytes()
    der = x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)
    assert rfc2253_name(der) == "CN=alice,OU=eng,O=Example,C=NO"
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=([^,]*),.*$/$1/U")
    assert principal_from_certificate(der, mapper) == KafkaPrincipal("User", "ALICE")
    assert principal_from_certificate(None, mapper) == ANONYMOUS


def test_rfc2253_escapes_and_unknown_attributes(tmp_path) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "NO"),
                      x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "Doe, John+x")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    # Java's X500Principal.getName(): keywords it knows, OID=#<DER hex> for the rest
    # (emailAddress is an IA5String, tag 0x16).
    assert rfc2253_name(cert.public_bytes(Encoding.DER)) == \
        "CN=Doe\\, John\\+x,1.2.840.113549.1.9.1=#16056140622e63,C=NO"
