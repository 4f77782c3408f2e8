"""TLS for the amqps listener and the management and metrics HTTPS listeners: a server SSLContext built from
one set of settings, reloaded in place on SIGHUP, and the user name a client certificate stands for (EXTERNAL
authentication)."""

from __future__ import annotations

import logging
import ssl
from typing import Any

from amqpd.config import Settings

log = logging.getLogger("amqpd.tls")

TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
CERT_LOGIN_SOURCES = ("common_name", "subject_alternative_name", "distinguished_name")


class TLSConfigError(ValueError):
    """The TLS settings cannot be used (a missing file, a bad version or cipher string)."""


def tls_enabled(settings: Settings, prefix: str = "tls") -> bool:
    """Whether a listener has a certificate: `prefix` names its settings, "tls" (amqps), "mgmt_tls" (the
    management API's HTTPS) or "prometheus_tls" (the metrics listener's HTTPS); each set has the same shape."""
    return bool(getattr(settings, f"{prefix}_cert_file"))


def server_context(settings: Settings, prefix: str = "tls") -> ssl.SSLContext:
    """A server-side context from the `prefix`_* settings. A listener keeps this one object for its
    lifetime: reload_context() changes it in place, so new handshakes see new files without a restart."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_COMPRESSION
    load_into(ctx, settings, prefix)
    return ctx


def load_into(ctx: ssl.SSLContext, settings: Settings, prefix: str = "tls") -> None:
    def setting(name: str) -> Any:
        return getattr(settings, f"{prefix}_{name}")

    version = TLS_VERSIONS.get(setting("min_version"))
    if version is None:
        raise TLSConfigError(f"{prefix}_min_version {setting('min_version')!r} is not one of {', '.join(TLS_VERSIONS)}")
    if prefix == "tls" and settings.tls_cert_login_from not in CERT_LOGIN_SOURCES:  # amqps logs users in by it
        raise TLSConfigError(
            f"tls_cert_login_from {settings.tls_cert_login_from!r} is not one of {', '.join(CERT_LOGIN_SOURCES)}"
        )
    try:
        ctx.load_cert_chain(setting("cert_file"), setting("key_file") or None)
        if setting("ca_file"):
            ctx.load_verify_locations(setting("ca_file"))
        if setting("ciphers"):
            ctx.set_ciphers(setting("ciphers"))
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f for f in (setting("cert_file"), setting("key_file"), setting("ca_file")) if f)
        raise TLSConfigError(f"cannot load the {prefix}_* certificate, key or CA ({files}): {exc}") from None
    ctx.minimum_version = version
    if not setting("verify_peer"):
        ctx.verify_mode = ssl.CERT_NONE
    elif setting("fail_if_no_peer_cert"):
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a certificate is checked when sent; none is also fine


def reload_context(ctx: ssl.SSLContext, settings: Settings, prefix: str = "tls") -> bool:
    """SIGHUP: read the certificate, key and CA files again into the listener's context. On an error the
    old ones stay in use (and the error is logged). A CA removed from the CA file stays trusted until restart
    (OpenSSL can add to a context's trust store, not remove from it)."""
    try:
        load_into(ctx, settings, prefix)
    except TLSConfigError as exc:
        log.error("TLS reload failed (%s_*), keeping the previous certificate: %s", prefix, exc)
        return False
    log.info("TLS certificate reloaded from %s (%s_*)", getattr(settings, f"{prefix}_cert_file"), prefix)
    return True


def cert_login_name(peercert: dict[str, Any] | None, source: str) -> str | None:
    """The user name a verified client certificate stands for, as RabbitMQ's ssl_cert_login_from: the
    subject's CN, the first subjectAltName (DNS, e-mail or URI), or the whole subject DN."""
    if not peercert:
        return None
    subject = [pair for rdn in peercert.get("subject", ()) for pair in rdn]
    if source == "common_name":
        names = [value for key, value in subject if key == "commonName"]
        return names[-1] if names else None
    if source == "subject_alternative_name":
        for kind, value in peercert.get("subjectAltName", ()):
            if kind in ("DNS", "email", "URI"):
                return str(value)
        return None
    return ",".join(f"{_DN_KEYS.get(key, key)}={value}" for key, value in reversed(subject)) or None


_DN_KEYS = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "domainComponent": "DC",
}
