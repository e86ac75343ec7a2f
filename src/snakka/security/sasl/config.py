"""The broker's SASL configuration, per listener: which mechanisms it enables and how each one
checks credentials (Kafka's ``SaslChannelBuilder`` + ``JaasContext`` for the server side).

Built once at start from the broker config (snakka.config's SASL block); every problem is a
:class:`~snakka.config.ConfigError` naming the key, so a broker never starts with a SASL
listener it cannot serve:

- ``GSSAPI`` (Kafka's default for ``sasl.enabled.mechanisms``) is refused: no Kerberos here;
- PLAIN needs a JAAS line (``listener.name.<l>.plain.sasl.jaas.config`` or
  ``sasl.jaas.config``) whose ``user_<name>`` options are its users, as Kafka requires;
- SCRAM needs no JAAS line (its ``ScramLoginModule required;`` is accepted): credentials come
  from the metadata log (AlterUserScramCredentials), through ``scram_lookup``;
- OAUTHBEARER validates against ``sasl.oauthbearer.jwks.endpoint.url`` when set (an http(s)
  one refreshed in a background thread, stopped by :meth:`SaslServerFactory.close`), else
  with Kafka's unsecured JWS validator and the ``unsecuredValidator*`` options of its JAAS
  line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from snakka.config import SASL_MECHANISMS_SUPPORTED, BrokerConfig, ConfigError
from snakka.security.sasl import SaslServer
from snakka.security.sasl.oauthbearer import (
    JwksValidator,
    OAuthBearerServer,
    TokenValidator,
    UnsecuredJwsValidator,
)
from snakka.security.sasl.plain import PlainServer
from snakka.security.sasl.scram import CredentialLookup, ScramServer
from snakka.util.jaas import JaasConfigError, JaasEntry, plain_users, single_entry
from snakka.util.scram import ScramMechanism

__all__ = ["ListenerSasl", "SaslServerFactory"]


@dataclass
class ListenerSasl:
    """One SASL listener's mechanisms."""

    enabled: list[str]
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth_validator: TokenValidator | None = None


def _jaas(cfg: BrokerConfig, listener: str, mechanism: str) -> tuple[str, JaasEntry | None]:
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = cfg.overrides.get(key)
    if text is None:
        key, text = "sasl.jaas.config", cfg.raw("sasl.jaas.config")
    if not text:
        return key, None
    try:
        return key, single_entry(text)
    except JaasConfigError as e:
        raise ConfigError(key, "[hidden]", str(e)) from None


class SaslServerFactory:
    """Creates a mechanism's server for each exchange on a SASL listener."""

    def __init__(self, cfg: BrokerConfig, scram_lookup: CredentialLookup) -> None:
        self._scram_lookup = scram_lookup
        self.listeners: dict[str, ListenerSasl] = {}
        self.reauth_ms = cfg.int("connections.max.reauth.ms")
        self.failed_authentication_delay_ms = cfg.int("connection.failed.authentication.delay.ms")
        for listener in cfg.listeners:
            if not cfg.listener_security_protocol(listener.name).startswith("SASL_"):
                continue
            self.listeners[listener.name] = self._listener(cfg, listener.name)

    def _listener(self, cfg: BrokerConfig, name: str) -> ListenerSasl:
        key = f"listener.name.{name.lower()}.sasl.enabled.mechanisms"
        if key not in cfg.overrides:
            key = "sasl.enabled.mechanisms"
        raw = cfg.listener_sasl_value(name, "sasl.enabled.mechanisms") or ""
        enabled = [m.strip() for m in raw.split(",") if m.strip()]
        if not enabled:
            raise ConfigError(key, raw, f"listener {name} uses SASL but enables no mechanism")
        for m in enabled:
            if m == "GSSAPI":
                raise ConfigError(key, raw, "GSSAPI (Kerberos) is not supported by snakka; set "
                                  f"{key} to some of {', '.join(SASL_MECHANISMS_SUPPORTED)}")
            if m not in SASL_MECHANISMS_SUPPORTED:
                raise ConfigError(key, raw, f"unsupported SASL mechanism {m!r} (supported: "
                                  f"{', '.join(SASL_MECHANISMS_SUPPORTED)})")
        out = ListenerSasl(enabled)
        if "PLAIN" in enabled:
            jkey, entry = _jaas(cfg, name, "PLAIN")
            if entry is None:
                raise ConfigError(jkey, None, f"listener {name} enables PLAIN: a JAAS line "
                                  "with its users (user_<name>=\"<password>\") is required")
            out.plain_users = plain_users(entry)
        if "OAUTHBEARER" in enabled:
            url = cfg.listener_sasl_value(name, "sasl.oauthbearer.jwks.endpoint.url",
                                          "OAUTHBEARER") or ""
            if url:
                try:
                    out.oauth_validator = JwksValidator(
                        url,
                        expected_audience=cfg.list("sasl.oauthbearer.expected.audience"),
                        expected_issuer=str(cfg.get("sasl.oauthbearer.expected.issuer") or ""),
                        sub_claim=str(cfg.get("sasl.oauthbearer.sub.claim.name")),
                        scope_claim=str(cfg.get("sasl.oauthbearer.scope.claim.name")),
                        clock_skew_s=cfg.int("sasl.oauthbearer.clock.skew.seconds"),
                        refresh_ms=cfg.int("sasl.oauthbearer.jwks.endpoint.refresh.ms"),
                        retry_backoff_ms=cfg.int(
                            "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"),
                        retry_backoff_max_ms=cfg.int(
                            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"))
                except (OSError, ValueError) as e:
                    raise ConfigError("sasl.oauthbearer.jwks.endpoint.url", url,
                                      f"cannot read the JWKS: {e}") from None
            else:
                _, entry = _jaas(cfg, name, "OAUTHBEARER")
                try:
                    out.oauth_validator = UnsecuredJwsValidator(entry.options if entry else {})
                except ValueError as e:
                    raise ConfigError("sasl.jaas.config", "[hidden]", str(e)) from None
        return out

    def close(self) -> None:
        """Stop what runs in the background (an http(s) JWKS's refresher thread)."""
        for ls in self.listeners.values():
            if isinstance(ls.oauth_validator, JwksValidator):
                ls.oauth_validator.close()

    def enabled_mechanisms(self, listener_name: str) -> list[str]:
        ls = self.listeners.get(listener_name)
        return list(ls.enabled) if ls is not None else []

    def create(self, listener_name: str, mechanism: str) -> SaslServer:
        """A fresh server for one exchange of an enabled mechanism."""
        ls = self.listeners[listener_name]
        assert mechanism in ls.enabled, mechanism
        if mechanism == "PLAIN":
            return PlainServer(ls.plain_users)
        if mechanism == "OAUTHBEARER":
            assert ls.oauth_validator is not None
            return OAuthBearerServer(ls.oauth_validator)
        return ScramServer(ScramMechanism.from_mechanism_name(mechanism), self._scram_lookup)
