"""TLS without sockets: which user a client certificate names, and TLS settings that cannot work refused
with a reason (at start, or at a SIGHUP reload, which then keeps the old certificate)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from amqpd.config import Settings
from amqpd.tls import TLSConfigError, cert_login_name, reload_context, server_context

PEERCERT = {
    "subject": ((("organizationName", "amqpd tests"),), (("commonName", "alice"),)),
    "subjectAltName": (("IP Address", "10.0.0.1"), ("DNS", "alice.example"), ("email", "a@example")),
}


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("common_name", "alice"),
        ("subject_alternative_name", "alice.example"),
        ("distinguished_name", "CN=alice,O=amqpd tests"),
    ],
)
def test_the_user_a_certificate_names(source: str, name: str) -> None:
    assert cert_login_name(PEERCERT, source) == name


def test_no_verified_certificate_names_nobody() -> None:
    assert cert_login_name({}, "common_name") is None
    assert cert_login_name(None, "common_name") is None
    assert cert_login_name({"subject": ()}, "subject_alternative_name") is None


def test_missing_files_and_bad_versions_are_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match="cannot load"):
        server_context(Settings(tls_cert_file=str(tmp_path / "missing.crt")))
    with pytest.raises(TLSConfigError, match="tls_min_version"):
        server_context(Settings(tls_cert_file="x", tls_min_version="SSLv3"))
    with pytest.raises(TLSConfigError, match="tls_cert_login_from"):
        server_context(Settings(tls_cert_file="x", tls_cert_login_from="serial"))


def test_a_failed_reload_keeps_the_context_as_it_was(tmp_path: Path) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = ssl.CERT_REQUIRED
    assert not reload_context(ctx, Settings(tls_cert_file=str(tmp_path / "gone.crt"), tls_verify_peer=False))
    assert ctx.verify_mode == ssl.CERT_REQUIRED


def test_the_https_listeners_settings_are_checked_under_their_own_names(tmp_path: Path) -> None:
    settings = Settings(
        mgmt_tls_cert_file=str(tmp_path / "missing.crt"),
        prometheus_tls_cert_file="x",
        prometheus_tls_min_version="TLSv1.0",
    )
    with pytest.raises(TLSConfigError, match="mgmt_tls_"):
        server_context(settings, "mgmt_tls")
    with pytest.raises(TLSConfigError, match="prometheus_tls_min_version"):
        server_context(settings, "prometheus_tls")
