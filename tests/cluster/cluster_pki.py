"""The control plane's own certificates and keys, made fresh for every test session.

One CA signs the API server's serving certificate and every client certificate (admin,
controller-manager, scheduler); the API server trusts client certificates from that CA and reads
the user from CN and the groups from O. A separate RSA key pair signs and verifies
service-account tokens. Nothing here is reused between sessions or leaves the temp dir.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: long enough for any test session, short enough that a leaked file is soon worthless
VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True)
class CertPair:
    """PEM files of one certificate and its private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Every file the control plane's flags name."""

    ca: CertPair
    serving: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    #: signs service-account tokens (kube-apiserver and the token controller)
    sa_private: Path
    #: verifies them
    sa_public: Path


def _key() -> ec.EllipticCurvePrivateKey:
    # P-256: fast to make on a loaded 2-core machine, accepted by Go's TLS stack
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + VALIDITY)
    )


def _save(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> CertPair:
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pair.key, key)
    return pair


class CertificateAuthority:
    """The session's CA: kept so a test can issue more client certificates (a node's)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = _key()
        self.name = _name("adl-test-ca")
        self.cert = (
            _builder(self.name, self.name, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pair = _save(directory, "ca", self.cert, self.key)

    def issue(
        self,
        stem: str,
        common: str,
        orgs: tuple[str, ...] = (),
        *,
        server_names: tuple[str, ...] = (),
    ) -> CertPair:
        key = _key()
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _builder(_name(common, orgs), self.name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server_names:
            alt: list[x509.GeneralName] = []
            for n in server_names:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(n)))
                except ValueError:
                    alt.append(x509.DNSName(n))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        return _save(self.directory, stem, builder.sign(self.key, hashes.SHA256()), key)


#: names the serving certificate answers to: loopback, and the in-cluster names a pod would use
SERVER_NAMES = (
    "127.0.0.1",
    "localhost",
    "10.0.0.1",  # the first address of the service range: the `kubernetes` Service
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def make_pki(directory: Path) -> tuple[Pki, CertificateAuthority]:
    """Write a fresh CA, certificates and the service-account key pair into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory)
    # RSA for service-account tokens: the API server's key-file flags expect RS256 keys
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_private, sa_public = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_private, sa_key)
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    pki = Pki(
        ca=ca.pair,
        serving=ca.issue("apiserver", "kube-apiserver", server_names=SERVER_NAMES),
        # the bootstrap RBAC policy grants these users exactly what each component needs
        admin=ca.issue("admin", "adl-test-admin", ("system:masters",)),
        controller_manager=ca.issue("controller-manager", "system:kube-controller-manager"),
        scheduler=ca.issue("scheduler", "system:kube-scheduler"),
        sa_private=sa_private,
        sa_public=sa_public,
    )
    return pki, ca
