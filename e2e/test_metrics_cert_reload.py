"""The https `metrics.listener` rotates its certificate without a restart, as the client
listeners do (docs/security.md, "Rotating certificates"):

- one broker: IncrementalAlterConfigs of `listener.name.metrics.ssl.keystore.location` through
  `gregor configs` makes new https connections to the metrics listener see the new certificate
  while `/healthz` keeps answering; a key store whose certificate has another subject is refused
  with INVALID_CONFIG and the served certificate stays;
- two nodes whose consoles read each other over https: node 1 moves its metrics listener to a
  certificate of a new CA, so node 0's console can no longer read node 1's groups (node 0 does
  not trust that CA); node 0's `listener.name.metrics.ssl.truststore.location` changed to both
  CAs makes its console read node 1 again, with no restart of either node.
"""

import socket
import ssl
import urllib.request

import pytest

import kwire
from conftest import wait_until
from pki import Ca
from test_cert_reload import Keystores, alter_raw, der, set_with_cli
from test_console_security import ADMIN_PW, At, MetricsBroker, api, https_cluster, seed_cluster

KEY = "listener.name.metrics.ssl.keystore.location"
TRUST = "listener.name.metrics.ssl.truststore.location"
INVALID_CONFIG = 40


@pytest.fixture
def pki(tmp_path):
    ca = Ca(tmp_path, "metrics-ca")
    return {"ca": ca, "keystore": ca.broker_keystore()}


def served(port, ca_pem):
    """The certificate (DER) a new https connection to `port` is shown."""
    ctx = ssl.create_default_context(cafile=str(ca_pem))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return s.getpeercert(binary_form=True)


def healthz(port, ca_pem):
    ctx = ssl.create_default_context(cafile=str(ca_pem))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=10) as r:
        return r.status


def test_the_metrics_listener_serves_a_new_certificate_without_a_restart(tmp_path):
    stores = Keystores(tmp_path)
    first, first_der = stores.make("metrics-1")
    b = MetricsBroker(tmp_path, {KEY: str(first), TRUST: str(stores.ca.pem),
                                 "metrics.listener.authentication": "none"}).start()
    try:
        assert served(b.metrics_port, stores.ca.pem) == first_der
        second, second_der = stores.make("metrics-2")
        set_with_cli(b.bootstrap, b.node_id, KEY, str(second))
        wait_until(lambda: served(b.metrics_port, stores.ca.pem) == second_der, 15,
                   "the metrics listener to serve the new certificate")
        assert healthz(b.metrics_port, stores.ca.pem) == 200

        other, _ = stores.make("metrics-3", cn="elsewhere")
        with kwire.Conn("127.0.0.1", b.port) as conn:
            code, message = alter_raw(conn, b.node_id, KEY, str(other))
        assert code == INVALID_CONFIG, message
        assert "subject" in message, message
        assert served(b.metrics_port, stores.ca.pem) == second_der
    finally:
        assert b.stop() == 0, b.log_path.read_text()[-3000:]


def test_a_console_trusts_a_peer_s_new_ca_once_its_trust_store_is_changed(tmp_path, pki):
    c = https_cluster(tmp_path, pki)
    try:
        seed_cluster(c)
        n0, n1 = c.nodes[0], c.nodes[1]
        viewer = At(n0)

        def node_1_read():
            answer = api(viewer, pki, "/ui/api/groups", "admin", ADMIN_PW)
            return {n["node_id"]: n["ok"] for n in answer["nodes"]}.get(1)

        wait_until(lambda: node_1_read() is True, 30, "node 0's console to read node 1")
        new_ca = Ca(tmp_path, "metrics-ca-2")
        moved = new_ca.broker_keystore("node-1-new")
        set_with_cli(n0.bootstrap, 1, KEY, str(moved))
        wait_until(lambda: served(n1.metrics_port, new_ca.pem) == der_of(moved), 15,
                   "node 1's metrics listener to serve the new CA's certificate")
        wait_until(lambda: node_1_read() is False, 30,
                   "node 0's console to refuse node 1's certificate of an unknown CA")

        bundle = tmp_path / "both-cas.pem"
        bundle.write_bytes(pki["ca"].pem.read_bytes() + new_ca.pem.read_bytes())
        set_with_cli(n0.bootstrap, 0, TRUST, str(bundle))
        wait_until(lambda: node_1_read() is True, 30,
                   "node 0's console to read node 1 with its reloaded trust store")
        assert n0.proc.poll() is None and n1.proc.poll() is None, "a node restarted"
    finally:
        problems = c.stop()
        assert not problems, "; ".join(problems) + "\n" + c.logs()


def der_of(keystore):
    """The DER of the certificate in a key store file (key, then certificate)."""
    pem = keystore.read_bytes()
    start = pem.index(b"-----BEGIN CERTIFICATE-----")
    crt = keystore.with_suffix(".crt-only")
    crt.write_bytes(pem[start:])
    return der(crt)
