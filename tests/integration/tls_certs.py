"""Certificates the TLS tests make for themselves (the `cryptography` package): a CA, a server certificate
for localhost/127.0.0.1, client certificates, and a second, untrusted CA."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Key = ec.EllipticCurvePrivateKey


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "amqpd tests"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def _builder(subject: str, issuer: x509.Name, key: Key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


class CA:
    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            _builder(name, _name(name), self.key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, cn: str, *, server: bool = False, san_dns: list[str] | None = None) -> tuple[x509.Certificate, Key]:
        key = ec.generate_private_key(ec.SECP256R1())
        b = _builder(cn, self.cert.subject, key).add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        )
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in san_dns or []]
        if server:
            names += [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        if names:
            b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return b.sign(self.key, hashes.SHA256()), key

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path


def write_pair(cert: x509.Certificate, key: Key, directory: Path, stem: str) -> tuple[Path, Path]:
    """`stem`.crt and `stem`.key in PEM."""
    crt, pem = directory / f"{stem}.crt", directory / f"{stem}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return crt, pem
