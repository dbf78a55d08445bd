"""A service's certificate authority and the server certificate it issues (TLS listeners: Kafka)."""

from __future__ import annotations

import ipaddress
import ssl

from cryptography import x509

from lakehouse.services.certificates import AUTHORITY_KEY, Authority, java_key_store, names_of


def test_the_authority_issues_a_certificate_for_the_address_and_its_names_that_tls_clients_accept(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n10.77.0.3 kafka kafka.lake  # the broker\n10.77.0.4 storage\n")
    assert names_of("10.77.0.3", hosts) == ["kafka", "kafka.lake"]
    assert names_of("10.77.0.9", hosts) == [] and names_of("10.77.0.3", tmp_path / "none") == []

    authority = Authority(tmp_path / "tls")
    pem = authority.folder / "server.pem"
    authority.issue(pem, "127.0.0.1")
    issued = x509.load_pem_x509_certificate(pem.read_bytes())
    signer = x509.load_pem_x509_certificate(authority.certificate.read_bytes())
    issued.verify_directly_issued_by(signer)
    alternatives = issued.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in alternatives.get_values_for_type(x509.IPAddress)
    assert "localhost" in alternatives.get_values_for_type(x509.DNSName)
    assert {oct(path.stat().st_mode & 0o777) for path in (pem, authority.folder / AUTHORITY_KEY)} == {"0o600"}
    assert oct(authority.folder.stat().st_mode & 0o777) == "0o700"
    # Python's own TLS stack loads the pair and trusts the chain: what a client does.
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pem)
    client = ssl.create_default_context(cafile=authority.certificate)
    assert client.cert_store_stats()["x509_ca"] == 1


def test_the_authority_is_made_once_and_signs_every_later_certificate(tmp_path):
    authority = Authority(tmp_path / "tls")
    authority.issue(tmp_path / "a.pem", "127.0.0.1")
    first = authority.certificate.read_bytes()
    authority.issue(tmp_path / "b.pem", "127.0.0.1")
    assert authority.certificate.read_bytes() == first
    signer = x509.load_pem_x509_certificate(first)
    x509.load_pem_x509_certificate((tmp_path / "b.pem").read_bytes()).verify_directly_issued_by(signer)


def test_java_servers_get_the_pair_as_a_pkcs12_key_store_and_clients_the_authority_as_a_trust_store(tmp_path):
    from cryptography.hazmat.primitives.serialization import pkcs12

    authority = Authority(tmp_path / "tls")
    pem, store = tmp_path / "server.pem", tmp_path / "server.p12"
    authority.issue(pem, "127.0.0.1")
    java_key_store(pem, store, "the password")
    authority.write_trust_store()

    held = pkcs12.load_pkcs12(store.read_bytes(), b"the password")
    assert held.cert.certificate == x509.load_pem_x509_certificate(pem.read_bytes()) and held.key is not None
    assert oct(store.stat().st_mode & 0o777) == "0o600"
    trusted = pkcs12.load_pkcs12(authority.trust_store.read_bytes(), None)  # no password: nothing secret in it
    assert held.key is not None and trusted.key is None
    assert [entry.certificate for entry in trusted.additional_certs] == [
        x509.load_pem_x509_certificate(authority.certificate.read_bytes())
    ]
