"""PKCS12 key and trust stores (`ssl.keystore.type=PKCS12`, `ssl.truststore.type=PKCS12`): a
broker whose SSL listener's key store and trust store are PKCS12 files made from `pki.py`'s
certificates by `openssl pkcs12 -export` and by keytool (skipped without a JDK's keytool), with
`ssl.client.auth=required`. kcat and confluent-kafka present their own PKCS12 key store
(librdkafka's `ssl.keystore.location`) and produce and consume; `gregor topics --command-config`
with PKCS12 key and trust stores lists topics. IncrementalAlterConfigs of the listener's
PKCS12 key store serves the new certificate, and one its password does not open is refused
with INVALID_CONFIG while the served certificate stays. A wrong store password, a trust store
given as the key store, a damaged file and a JKS store each stop start-up with a message naming
the setting, never a password."""

import functools
import shutil
import socket
import ssl
import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, \
    ResourceType
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from clients import round_trip
from conftest import ListenersBroker, gregor_bin
from pki import Ca

STORE_PW = "p12-Store-pw-81"
WRONG_PW = "not-the-pw-3141"
INVALID_CONFIG = 40

TlsBroker = functools.partial(ListenersBroker, extra=("SSL",), name="p12")


def openssl_export(out, *args):
    subprocess.run(["openssl", "pkcs12", "-export", "-passout", f"pass:{STORE_PW}", "-out",
                    str(out), *map(str, args)], check=True, capture_output=True, timeout=30)
    return out


def keytool(*args):
    subprocess.run(["keytool", *map(str, args)], check=True, capture_output=True, timeout=60)


class Stores:
    """PKCS12 stores of one CA, written by `maker`: "openssl" (`openssl pkcs12 -export`) or
    "keytool" (the JDK's, which rewrites openssl's key stores and imports CA certificates)."""

    def __init__(self, tmp_path, maker):
        self.dir, self.maker = tmp_path, maker
        self.ca = Ca(tmp_path, "p12-ca")

    def keystore(self, name, cn):
        """`name`.p12 holding a new key, its certificate CN=`cn` (for localhost) and the CA;
        returns (path, certificate DER)."""
        crt, key = self.ca.issue(name, cn)
        path = openssl_export(self.dir / f"{name}.p12", "-inkey", key, "-in", crt,
                              "-certfile", self.ca.pem, "-name", name)
        if self.maker == "keytool":
            java = self.dir / f"{name}-keytool.p12"
            keytool("-importkeystore", "-noprompt", "-srckeystore", path, "-srcstoretype",
                    "PKCS12", "-srcstorepass", STORE_PW, "-destkeystore", java,
                    "-deststoretype", "PKCS12", "-deststorepass", STORE_PW)
            path = java
        cert = x509.load_pem_x509_certificate(crt.read_bytes())
        return path, cert.public_bytes(serialization.Encoding.DER)

    def truststore(self):
        """trust.p12 holding the CA certificate (no key)."""
        path = self.dir / "trust.p12"
        if path.exists():
            return path
        if self.maker == "keytool":
            keytool("-importcert", "-noprompt", "-alias", "p12-ca", "-file", self.ca.pem,
                    "-storetype", "PKCS12", "-keystore", path, "-storepass", STORE_PW)
        else:
            openssl_export(path, "-nokeys", "-in", self.ca.pem)
        return path


@pytest.fixture(params=["openssl", "keytool"])
def stores(request, tmp_path):
    if request.param == "keytool" and shutil.which("keytool") is None:
        pytest.skip("keytool (a JDK) is not installed")
    return Stores(tmp_path, request.param)


def broker_settings(keystore, truststore, **extra):
    settings = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore),
                "ssl.keystore.password": STORE_PW, "ssl.truststore.type": "PKCS12",
                "ssl.truststore.location": str(truststore),
                "ssl.truststore.password": STORE_PW, "ssl.client.auth": "required"}
    settings.update(extra)
    return settings


@pytest.fixture
def p12_broker(stores):
    keystore, served = stores.keystore("broker", "localhost")
    b = TlsBroker(stores.dir, broker_settings(keystore, stores.truststore()))
    b.start()
    b.served = served
    yield b
    assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"


def served_certificate(port, stores, client):
    """The certificate (DER) a new TLS connection to `port` is shown, presenting `client`'s
    certificate (the listener requires one)."""
    ctx = ssl.create_default_context(cafile=str(stores.ca.pem))
    ctx.load_cert_chain(str(client[0]), str(client[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=15) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return s.getpeercert(binary_form=True)


def test_kcat_confluent_kafka_and_gregor_over_pkcs12_stores(p12_broker, stores):
    b = p12_broker
    alice, _ = stores.keystore("alice", "alice")
    conf = {"bootstrap.servers": f"localhost:{b.ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(stores.ca.pem), "ssl.keystore.location": str(alice),
            "ssl.keystore.password": STORE_PW}
    assert round_trip(conf, "p12-confluent", n=5) == [f"v{i}" for i in range(5)]

    kcat = ["kcat", "-b", f"localhost:{b.ssl_port}", "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={stores.ca.pem}", "-X", f"ssl.keystore.location={alice}",
            "-X", f"ssl.keystore.password={STORE_PW}"]
    subprocess.run(kcat + ["-P", "-t", "p12-kcat"], input=b"a\nb\nc\n", check=True, timeout=30)
    out = subprocess.run(kcat + ["-C", "-t", "p12-kcat", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30).stdout.decode().split()
    assert out == ["a", "b", "c"]
    # Without a client certificate the listener refuses the handshake.
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": f"localhost:{b.ssl_port}",
                     "security.protocol": "SSL", "ssl.ca.location": str(stores.ca.pem)}
                    ).list_topics(timeout=5)

    # Gregor's own client with the Java client's PKCS12 settings.
    props = stores.dir / "client.properties"
    props.write_text("security.protocol=SSL\n"
                     f"ssl.truststore.type=PKCS12\nssl.truststore.location={stores.truststore()}\n"
                     f"ssl.truststore.password={STORE_PW}\n"
                     f"ssl.keystore.type=PKCS12\nssl.keystore.location={alice}\n"
                     f"ssl.keystore.password={STORE_PW}\n")
    topics = [gregor_bin(), "topics", "--bootstrap-server", f"localhost:{b.ssl_port}",
              "--command-config", str(props)]
    r = subprocess.run(topics + ["--list"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert {"p12-confluent", "p12-kcat"} <= set(r.stdout.split()), r.stdout
    # A wrong store password in the client's settings: a clear error naming the setting.
    props.write_text(props.read_text().replace(f"ssl.keystore.password={STORE_PW}",
                                               f"ssl.keystore.password={WRONG_PW}"))
    r = subprocess.run(topics + ["--list"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout
    assert "ssl.keystore.password" in r.stderr, r.stderr
    assert WRONG_PW not in r.stderr + r.stdout and STORE_PW not in r.stderr + r.stdout


def test_a_pkcs12_key_store_is_reloaded_and_one_its_password_does_not_open_is_refused(
        p12_broker, stores):
    b = p12_broker
    client = stores.ca.issue("reload-client", "reload-client")
    assert served_certificate(b.ssl_port, stores, client) == b.served
    renewed, renewed_der = stores.keystore("renewed", "localhost")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    def alter(entries):
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries])
        try:
            admin.incremental_alter_configs([resource])[resource].result(30)
            return 0
        except KafkaException as e:
            return e.args[0].code()

    location = "listener.name.ssl.ssl.keystore.location"
    password = "listener.name.ssl.ssl.keystore.password"
    assert alter([(location, str(renewed)), (password, WRONG_PW)]) == INVALID_CONFIG
    assert served_certificate(b.ssl_port, stores, client) == b.served, "the served one stays"
    assert alter([(location, str(renewed)), (password, STORE_PW)]) == 0
    assert served_certificate(b.ssl_port, stores, client) == renewed_der
    # The broker's own lines (the harness writes the command line it started, above them).
    logged = [line for line in b.log_path.read_text().splitlines()
              if not line.startswith("===== start")]
    assert logged and not [line for line in logged if WRONG_PW in line or STORE_PW in line]


def start_up_error(stores, settings):
    """Runs a broker with `settings` that must not start; its stderr."""
    b = TlsBroker(stores.dir, settings)
    r = subprocess.run(b.argv(), capture_output=True, timeout=30)
    assert r.returncode != 0, f"{settings} started"
    return r.stderr.decode()


def test_pkcs12_stores_that_cannot_work_stop_start_up_naming_the_setting(stores):
    keystore, _ = stores.keystore("broker", "localhost")
    truststore = stores.truststore()
    damaged = stores.dir / "damaged.p12"
    damaged.write_bytes(keystore.read_bytes()[: keystore.stat().st_size // 2])
    for overrides, expected in [
        ({"ssl.keystore.password": WRONG_PW},
         "ssl.keystore.password: for ssl.keystore.location: the password does not open"),
        ({"ssl.truststore.password": WRONG_PW},
         "ssl.truststore.password: for ssl.truststore.location"),
        ({"ssl.keystore.location": str(truststore)},
         "ssl.keystore.location: holds no private key"),
        ({"ssl.keystore.location": str(damaged)},
         "ssl.keystore.location: is not a readable PKCS12 store"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type: JKS stores are not supported"),
    ]:
        err = start_up_error(stores, broker_settings(keystore, truststore, **overrides))
        assert expected in err, err
        assert WRONG_PW not in err and STORE_PW not in err, err
