"""Certificates for the TLS tests, made with python's `cryptography`: a CA that issues broker
and client certificates (X.509 v3, EC P-256, PKCS#8 keys, valid for `localhost` and 127.0.0.1),
expired ones too, as PEM files."""

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn, org=None):
    attrs = ([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else [])
    return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class Ca:
    """A certificate authority writing PEM files into `dir`."""

    def __init__(self, dir, name):
        self.dir = dir
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder()
                     .subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = dir / f"{name}.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, file, cn, org=None, expired=False):
        """Writes `file`.crt and `file`.key (PKCS#8); returns their paths. The subject is
        O=`org`, CN=`cn`: the principal `User:CN=<cn>,O=<org>` by Kafka's default mapping."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = ((now - datetime.timedelta(days=10), now - datetime.timedelta(days=5))
                      if expired else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=2)))
        san = x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                           x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        cert = (x509.CertificateBuilder()
                .subject_name(_name(cn, org)).issuer_name(self.cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(san, critical=False)
                .sign(self.key, hashes.SHA256()))
        crt, pem_key = self.dir / f"{file}.crt", self.dir / f"{file}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pem_key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        return crt, pem_key

    def broker_keystore(self, file="broker"):
        """A broker's `ssl.keystore.location` file (its key, then its certificate) for
        `localhost` / 127.0.0.1; returns its path."""
        crt, key = self.issue(file, "localhost")
        keystore = self.dir / f"{file}-keystore.pem"
        keystore.write_bytes(key.read_bytes() + crt.read_bytes())
        return keystore
