"""SCRAM credentials managed as Kafka users manage them, on a three-node cluster: confluent-kafka's
admin client (AlterUserScramCredentials / DescribeUserScramCredentials, KIP-554) and
`gregor configs --entity-type users` (kafka-configs.sh's shapes) set, describe and delete them
through different nodes; Kafka's per-user errors come back; a restart of every node keeps them
(they are records of the replicated metadata log); and no password, salted password or derived
key shows in the brokers' logs (at debug level) or in the tool's output."""

import base64
import hashlib
import hmac
import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

from conftest import gregor_bin, wait_until

PASSWORDS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2", "carol": "carol-Secret-3"}
ALICE_SALT = b"alice-salt-0123456789"
RESOURCE_NOT_FOUND, UNACCEPTABLE_CREDENTIAL = 91, 93


def derived_secrets(password, salt, iterations, hash_name):
    """Salted password, stored key and server key (RFC 5802), each as hex and base64."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored = hashlib.new(hash_name, client_key).digest()
    server = hmac.new(salted, b"Server Key", hash_name).digest()
    out = []
    for b in (salted, stored, server):
        out += [b.hex(), base64.b64encode(b).decode()]
    return out


def gregor_configs(node, *args):
    return subprocess.run([gregor_bin(), "configs", "--bootstrap-server", node.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def described(admin, users=None):
    """{user: {mechanism name: iterations}} or {user: error code} per user."""
    out = {}
    futures = admin.describe_user_scram_credentials(users)
    if users is None:
        results = futures.result(timeout=30).items()
    else:
        results = []
        for user, f in futures.items():
            try:
                results.append((user, f.result(timeout=30)))
            except KafkaException as e:
                out[user] = e.args[0].code()
    for user, desc in results:
        out[user] = {i.mechanism.name.replace("_", "-"): i.iterations
                     for i in desc.scram_credential_infos}
    return out


def alter_codes(admin, alterations):
    """{user: None or error code}."""
    codes = {}
    for user, f in admin.alter_user_scram_credentials(alterations).items():
        try:
            f.result(timeout=30)
            codes[user] = None
        except KafkaException as e:
            codes[user] = e.args[0].code()
    return codes


@pytest.mark.timeout(180)
def test_scram_credentials_are_altered_described_and_survive_a_restart(cluster_factory,
                                                                        monkeypatch):
    # Debug logging on every node: a secret that reached any log line would show.
    monkeypatch.setenv("RUST_LOG", "debug")
    c = cluster_factory(3)
    n0, n1, n2 = c.nodes[0], c.nodes[1], c.nodes[2]
    admin = AdminClient({"bootstrap.servers": n0.bootstrap})

    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    codes = alter_codes(admin, [
        UserScramCredentialUpsertion("alice", sha512, PASSWORDS["alice"].encode(), ALICE_SALT),
        UserScramCredentialUpsertion("bob", sha256, PASSWORDS["bob"].encode()),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                                 1000), b"too-few"),
        UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512),
    ])
    assert codes == {"alice": None, "bob": None, "dave": UNACCEPTABLE_CREDENTIAL,
                     "erin": RESOURCE_NOT_FOUND}, codes

    # Another node's image has them (DescribeUserScramCredentials is answered locally).
    other = AdminClient({"bootstrap.servers": n2.bootstrap})
    want = {"alice": {"SCRAM-SHA-512": 8192}, "bob": {"SCRAM-SHA-256": 4096}}
    wait_until(lambda: described(other) == want, 10, "node 2 to describe alice and bob")
    assert described(other, ["alice", "nobody"]) == {"alice": {"SCRAM-SHA-512": 8192},
                                                     "nobody": RESOURCE_NOT_FOUND}

    # kafka-configs.sh's shapes, through node 1.
    out = gregor_configs(n1, "--entity-type", "users", "--entity-name", "carol", "--alter",
                         "--add-config",
                         f"SCRAM-SHA-512=[iterations=8192,password={PASSWORDS['carol']}]")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Completed updating config for user carol.\n"
    out = gregor_configs(n1, "--entity-type", "users", "--entity-name", "alice", "--alter",
                         "--delete-config", "SCRAM-SHA-512")
    assert out.returncode == 0, out.stderr
    outputs = [out.stdout + out.stderr]
    out = gregor_configs(n1, "--entity-type", "users", "--entity-name", "alice", "--alter",
                         "--delete-config", "SCRAM-SHA-512")
    assert out.returncode != 0
    assert "RESOURCE_NOT_FOUND" in out.stderr, out.stderr
    outputs.append(out.stdout + out.stderr)

    want = {"bob": {"SCRAM-SHA-256": 4096}, "carol": {"SCRAM-SHA-512": 8192}}
    wait_until(lambda: described(other) == want, 10, "node 2 to see carol added, alice deleted")
    out = gregor_configs(n2, "--describe", "--entity-type", "users")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096\n"
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=8192\n"
    ), out.stdout
    outputs.append(out.stdout + out.stderr)

    # Every node restarts on its data directory: the credentials come back from the log.
    # (Node by node: the cluster's own stop also closes the links between the nodes.)
    for n in c.nodes.values():
        assert n.stop() == 0, f"node {n.node_id} did not stop cleanly"
    for n in c.nodes.values():
        n.start()
    for n in c.nodes.values():
        n.wait_ready()
    again = AdminClient({"bootstrap.servers": n1.bootstrap})
    wait_until(lambda: described(again) == want, 20, "the restarted cluster to describe them")
    out = gregor_configs(n0, "--describe", "--entity-type", "users", "--entity-name", "carol")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ("SCRAM credential configs for user-principal 'carol' are "
                          "SCRAM-SHA-512=iterations=8192\n")
    outputs.append(out.stdout + out.stderr)

    secrets = list(PASSWORDS.values()) + ["too-few"]
    secrets += derived_secrets(PASSWORDS["alice"], ALICE_SALT, 8192, "sha512")
    logs = {n.node_id: n.log_path.read_text(errors="replace") for n in c.nodes.values()}
    # The controller's own line about the request is there: the handling path was logged.
    assert any("AlterUserScramCredentials" in text for text in logs.values())
    for node_id, text in logs.items():
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"node {node_id}'s log shows a secret"
    for text in outputs:
        assert not [s for s in secrets if s in text], text


@pytest.mark.timeout(90)
def test_format_add_scram_bootstraps_the_first_credentials_once(tmp_path):
    """KIP-900: `gregor storage format --add-scram` before the first start puts the credential
    in the new metadata log; deleted later, it stays deleted across a restart (the bootstrap
    applies to a new log only)."""
    from conftest import Broker

    b = Broker(tmp_path, name="boot")
    props = tmp_path / "server.properties"
    props.write_text(f"node.id={b.node_id}\nlog.dirs={b.data_dir}\n")
    fmt = subprocess.run([gregor_bin(), "storage", "format", "-c", str(props),
                          "-t", "gregorTestClusterId000", "--standalone", "--add-scram",
                          "SCRAM-SHA-512=[name=admin,password=admin-Secret-9,iterations=8192]",
                          "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-Secret-9]"],
                         capture_output=True, text=True, timeout=60)
    assert fmt.returncode == 0, fmt.stderr
    assert "admin-Secret-9" not in fmt.stdout + fmt.stderr
    raw = (b.data_dir / "bootstrap.records").read_bytes()
    assert b"admin-Secret-9" not in raw

    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert described(admin) == {"admin": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}}

    codes = alter_codes(admin, [UserScramCredentialDeletion("admin", ScramMechanism.SCRAM_SHA_256),
                                UserScramCredentialDeletion("admin", ScramMechanism.SCRAM_SHA_512)])
    assert codes == {"admin": None}
    assert described(admin) == {}
    assert b.stop() == 0
    b.start()
    again = AdminClient({"bootstrap.servers": b.bootstrap})
    assert described(again, ["admin"]) == {"admin": RESOURCE_NOT_FOUND}
    assert "admin-Secret-9" not in b.log_path.read_text(errors="replace")
