"""The certificates and keys of a test control plane.

Why a module of its own: the API server, every client and our scheduler's serving
certificate trust one CA made per control plane, and service-account tokens are signed by a
key pair of their own; making them is pure ``cryptography`` work, apart from the processes.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Pki:
    """The files of the cluster's trust: written once per control plane by :meth:`create`.

    ``ca`` signs the API server's serving certificate and every client certificate (the API
    server's ``--client-ca-file``); ``sa_key``/``sa_pub`` sign and check service-account tokens.
    """

    directory: Path
    ca_cert: Path
    ca_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def create(cls, directory: Path) -> Pki:
        from cryptography.hazmat.primitives.asymmetric import rsa

        directory.mkdir(parents=True, exist_ok=True)
        ca_key = _ec_key()
        ca_cert = _certificate("xpushare-test-ca", ca_key, None, ca=True)
        pki = cls(
            directory,
            directory / "ca.crt",
            directory / "ca.key",
            directory / "sa.key",
            directory / "sa.pub",
        )
        pki.ca_cert.write_bytes(_pem_cert(ca_cert))
        pki.ca_key.write_bytes(_pem_key(ca_key))
        # RSA: the algorithm every Kubernetes release verifies service-account tokens with.
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pki.sa_key.write_bytes(_pem_key(sa_key))
        pki.sa_pub.write_bytes(_pem_public(sa_key))
        return pki

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organizations: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
    ) -> tuple[Path, Path]:
        """A certificate signed by the CA (client when no *hosts*, else serving for them):
        its (cert, key) files, ``<name>.crt`` and ``<name>.key``."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = _ec_key()
        cert = _certificate(
            common_name,
            key,
            (ca_cert, ca_key),
            organizations=organizations,
            hosts=hosts,
        )
        cert_file = self.directory / f"{name}.crt"
        key_file = self.directory / f"{name}.key"
        cert_file.write_bytes(_pem_cert(cert))
        key_file.write_bytes(_pem_key(key))
        return cert_file, key_file


def _ec_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _certificate(
    common_name: str,
    key: Any,
    issuer: tuple[Any, Any] | None,
    *,
    ca: bool = False,
    organizations: tuple[str, ...] = (),
    hosts: tuple[str, ...] = (),
) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    subject = x509.Name(attributes)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if hosts else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    signer = key if issuer is None else issuer[1]
    return builder.sign(signer, hashes.SHA256())


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _pem_public(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
