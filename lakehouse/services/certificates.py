"""Certificates for a service's TLS listener: an authority of the service's own home signs the
server's certificate for the address it listens on and the names that address has, and clients
trust that authority alone (they check the name they dial, as TLS does by default).

The authority's key never leaves its folder (mode 700) and signs nothing but the service's
certificate; its certificate is what a client is given (``AUTHORITY_CERTIFICATE``). The server's key and
certificate go to one PEM file, the form Kafka's PEM key store reads; Java servers that read only
key stores (the Thrift server's HiveServer2) get them as PKCS12, and Java clients the authority as a
PKCS12 trust store (``TRUST_STORE``).
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import sys
from pathlib import Path

from lakehouse.settings import AUTHORITY_CERTIFICATE

AUTHORITY_KEY = "ca.key"
TRUST_STORE = "truststore.p12"
VALID_DAYS = 3650


def names_of(address: str, hosts_file: Path = Path("/etc/hosts")) -> list[str]:
    """The names ``address`` has in the host's ``/etc/hosts``: a deployment's clients dial a host by
    the name its hosts file gives (lakehouse.services.deployment writes each host's), loopback's by
    ``localhost``. The file alone, not DNS: a reverse lookup of an unknown address can stall for
    seconds where no resolver answers."""
    names: set[str] = set()
    try:
        lines = hosts_file.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) > 1 and fields[0] == address:
            names.update(fields[1:])
    return sorted(names)


def _private_key():
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)  # what every TLS client takes


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_private(path: Path, content: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    path.chmod(0o600)


@dataclasses.dataclass(frozen=True)
class Authority:
    """A home's certificate authority, in ``folder``."""

    folder: Path

    @property
    def certificate(self) -> Path:
        return self.folder / AUTHORITY_CERTIFICATE

    def ensure(self) -> None:
        """Make the authority once: a key and a self-signed certificate."""
        if self.certificate.is_file() and (self.folder / AUTHORITY_KEY).is_file():
            return
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import NameOID

        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)
        key = _private_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lakehouse certificate authority")])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        _write_private(self.folder / AUTHORITY_KEY, _pem_key(key))
        self.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))

    @property
    def trust_store(self) -> Path:
        return self.folder / TRUST_STORE

    def write_trust_store(self) -> None:
        """The authority's certificate as a Java trust store: PKCS12 with no password, as it holds
        nothing secret (Java's JKS key stores read PKCS12 files, with or without one)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12

        self.ensure()
        authority = pkcs12.PKCS12Certificate(
            x509.load_pem_x509_certificate(self.certificate.read_bytes()), b"lakehouse"
        )
        stored = pkcs12.serialize_java_truststore([authority], serialization.NoEncryption())
        partial = self.trust_store.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(stored)
        partial.replace(self.trust_store)  # a client reading it meanwhile reads the old one or the new

    def issue(self, pem: Path, address: str) -> None:
        """Write the server's key and certificate to ``pem`` (mode 600): for ``address`` (or a host's
        name) and its names."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        self.ensure()
        signer = serialization.load_pem_private_key((self.folder / AUTHORITY_KEY).read_bytes(), None)
        issuer = x509.load_pem_x509_certificate(self.certificate.read_bytes())
        key, now = _private_key(), datetime.datetime.now(datetime.UTC)
        try:
            alternatives: list = [x509.IPAddress(ipaddress.ip_address(address))]
        except ValueError:  # a listener given by its host's name
            alternatives = [x509.DNSName(address)]
        alternatives += [x509.DNSName(name) for name in names_of(address) if name != address]
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]))
            .issuer_name(issuer.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(signer, hashes.SHA256())
        )
        _write_private(pem, _pem_key(key) + certificate.public_bytes(serialization.Encoding.PEM))


def java_key_store(pem: Path, store: Path, password: str) -> None:
    """The key and certificate of ``pem`` as a PKCS12 key store at ``store`` (mode 600), under
    ``password``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    content = pem.read_bytes()
    key = serialization.load_pem_private_key(content, None)
    certificate = x509.load_pem_x509_certificate(content[content.index(b"-----BEGIN CERTIFICATE") :])
    encryption = serialization.BestAvailableEncryption(password.encode())
    _write_private(store, pkcs12.serialize_key_and_certificates(b"server", key, certificate, None, encryption))


def main(arguments: list[str]) -> int:
    """``python -m lakehouse.services.certificates AUTHORITY_FOLDER PEM ADDRESS``: the key and
    certificate for ADDRESS in PEM (once), issued by the authority in AUTHORITY_FOLDER (made once);
    scripts/airflow.sh gives PostgreSQL its certificate this way."""
    if len(arguments) != 3:
        print("usage: python -m lakehouse.services.certificates AUTHORITY_FOLDER PEM ADDRESS", file=sys.stderr)
        return 2
    folder, pem, address = arguments
    if not Path(pem).is_file():
        Authority(Path(folder)).issue(Path(pem), address)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
