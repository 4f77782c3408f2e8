"""TLS for the amqps listener: the server's SSLContext built from the settings, reloaded in place on SIGHUP,
and the user name a client certificate stands for (EXTERNAL authentication)."""

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


def tls_enabled(settings: Settings) -> bool:
    return bool(settings.tls_cert_file)


def server_context(settings: Settings) -> ssl.SSLContext:
    """A server-side context from the tls_* settings. The amqps listener keeps this one object for its
    lifetime: reload_context() changes it in place, so new handshakes see new files without a restart."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_COMPRESSION
    load_into(ctx, settings)
    return ctx


def load_into(ctx: ssl.SSLContext, settings: Settings) -> None:
    version = TLS_VERSIONS.get(settings.tls_min_version)
    if version is None:
        raise TLSConfigError(f"tls_min_version {settings.tls_min_version!r} is not one of {', '.join(TLS_VERSIONS)}")
    if settings.tls_cert_login_from not in CERT_LOGIN_SOURCES:
        raise TLSConfigError(
            f"tls_cert_login_from {settings.tls_cert_login_from!r} is not one of {', '.join(CERT_LOGIN_SOURCES)}"
        )
    try:
        ctx.load_cert_chain(settings.tls_cert_file, settings.tls_key_file or None)
        if settings.tls_ca_file:
            ctx.load_verify_locations(settings.tls_ca_file)
        if settings.tls_ciphers:
            ctx.set_ciphers(settings.tls_ciphers)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"cannot load TLS certificate, key or CA: {exc}") from None
    ctx.minimum_version = version
    if not settings.tls_verify_peer:
        ctx.verify_mode = ssl.CERT_NONE
    elif settings.tls_fail_if_no_peer_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a certificate is checked when sent; none is also fine


def reload_context(ctx: ssl.SSLContext, settings: Settings) -> bool:
    """SIGHUP: read the certificate, key and CA files again into the listener's context. On an error the
    old ones stay in use (and the error is logged). A CA removed from the CA file stays trusted until restart
    (OpenSSL can add to a context's trust store, not remove from it)."""
    try:
        load_into(ctx, settings)
    except TLSConfigError as exc:
        log.error("TLS reload failed, keeping the previous certificate: %s", exc)
        return False
    log.info("TLS certificate reloaded from %s", settings.tls_cert_file)
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
