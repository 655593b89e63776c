"""SASL/OAUTHBEARER on a real broker process: JWTs checked against a JWKS file (KIP-768).

The test makes an RSA and an EC signing key (`cryptography`), writes their JSON Web Key Set, and
starts a broker with PLAINTEXT (the fixtures' readiness check and the super user's admin
connection), SASL_PLAINTEXT and SASL_SSL listeners that enable OAUTHBEARER, with an expected
audience and issuer and Gregor's authorizer. Tokens are signed with PyJWT. It checks:
confluent-kafka (`oauth_cb`) and kafka-python (`sasl_oauth_token_provider`) produce and consume
as the token's `sub`, which is the principal the ACLs see (alice is allowed, bob denied); a wrong
signature, audience or issuer, an expired token, `alg: none` and an unknown key id are each
answered with the error challenge and then SASL_AUTHENTICATION_FAILED, and the broker keeps
serving; rotating the key set by rewriting the file; `gregor topics` with OAUTHBEARER from
`--command-config`; no token signature reaches the broker's log (at debug level).

The key set can also come from an https endpoint: a loopback HTTPS server run by the test
(`http.server` + `ssl`, its certificate from `pki.Ca`), trusted through the OAuthBearerLoginModule
JAAS line's `ssl.truststore.location`. Tokens signed with its keys log in; a new key id served
there is picked up without a restart; the server going away keeps the last good keys; a server
certificate no trusted CA signed stops start-up with a message naming the certificate problem."""

import base64
import functools
import http.server
import json
import ssl
import subprocess
import threading
import time

import jwt
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from kafka import KafkaConsumer, KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider

import kwire
from clients import round_trip
from conftest import ListenersBroker, gregor_bin, wait_until
from pki import Ca

ISSUER = "https://issuer.gregor.test"
AUDIENCE = "gregor"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_AUTHENTICATION_FAILED = 58
CHALLENGE = b'{"status":"invalid_token"}'
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class Key:
    """A signing key with its key id and JWS algorithm."""

    def __init__(self, kid, alg):
        self.kid, self.alg = kid, alg
        if alg == "RS256":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key()))
        self.jwk.update(kid=kid, use="sig", alg=alg)

    def token(self, sub, lifetime=600, kid=None, **claims):
        now = int(time.time())
        payload = {"sub": sub, "iss": ISSUER, "aud": [AUDIENCE, "other"], "iat": now,
                   "exp": now + lifetime, "scope": "kafka"}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, self.private, algorithm=self.alg,
                          headers={"kid": kid or self.kid})


def write_jwks(path, keys):
    path.write_text(json.dumps({"keys": [k.jwk for k in keys]}))


def signature(token):
    return token.rsplit(".", 1)[1]



OAuthBroker = functools.partial(ListenersBroker, extra=("SASL_PLAINTEXT", "SASL_SSL"), name="oauth")


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("RUST_LOG", "debug")
    ca = Ca(tmp_path, "oauth-ca")
    crt, key = ca.issue("broker", "localhost")
    keystore = tmp_path / "broker-keystore.pem"
    keystore.write_bytes(key.read_bytes() + crt.read_bytes())
    keys = {"rsa": Key("rsa-1", "RS256"), "ec": Key("ec-1", "ES256")}
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, keys.values())
    b = OAuthBroker(tmp_path, {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        # Kafka's per-listener, per-mechanism spelling for one listener; broker-wide for the rest.
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url":
            f"file://{jwks}",
        "sasl.oauthbearer.jwks.endpoint.url": str(jwks),
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(ca.pem),
    })
    b.start()
    tokens = []
    yield {"broker": b, "keys": keys, "jwks": jwks, "dir": tmp_path, "ca": ca.pem,
           "tokens": tokens}
    assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"
    log = b.log_path.read_text(errors="replace")
    # An unsigned (alg none) token has an empty signature: look for the token itself then.
    leaked = [t for t in tokens if (signature(t) or t) in log]
    assert not leaked, "a token (or its signature) reached the broker's log"


def oauth_conf(s, token, tls=False):
    """confluent-kafka settings whose oauth_cb hands out `token`."""
    s["tokens"].append(token)
    b = s["broker"]
    sub = jwt.decode(token, options={"verify_signature": False})["sub"]
    conf = {"bootstrap.servers": f"127.0.0.1:{b.sasl_ssl_port if tls else b.sasl_port}",
            "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token, time.time() + 600, sub, {})}
    if tls:
        conf["ssl.ca.location"] = str(s["ca"])
    return conf


def admin(s):
    return AdminClient({"bootstrap.servers": s["broker"].bootstrap})


def allow_alice(s, topic):
    a = admin(s)
    a.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                           "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    bindings.append(AclBinding(ResourceType.GROUP, "oauth-", ResourcePatternType.PREFIXED,
                               "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
    for f in a.create_acls(bindings).values():
        f.result(20)



def raw_login(port, token_bytes):
    """OAUTHBEARER by hand: the first SaslAuthenticate's (code, auth bytes), then, after a
    challenge, the (code, message) answering the client's \\x01, and whether the broker closed."""
    with kwire.Conn("127.0.0.1", port) as c:
        r = c.request(SASL_HANDSHAKE, 1, kwire.W().string("OAUTHBEARER").done())
        assert r.i16() == 0
        r = c.request(SASL_AUTHENTICATE, 1, kwire.W().bytes_(token_bytes).done())
        code, message, auth = r.i16(), r.string(), r.bytes_()
        if code != 0 or not auth:
            return code, message, auth, c.closed_within(5) if code else False
        assert auth == CHALLENGE, auth
        r = c.request(SASL_AUTHENTICATE, 1, kwire.W().bytes_(b"\x01").done())
        code, message = r.i16(), r.string()
        return code, message, auth, c.closed_within(5)


def initial_response(token):
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def still_serves(s):
    alice = s["keys"]["rsa"].token("alice")
    s["tokens"].append(alice)
    code, _, auth, _ = raw_login(s["broker"].sasl_port, initial_response(alice))
    assert (code, auth) == (0, b"")
    with kwire.Conn("127.0.0.1", s["broker"].port) as c:
        assert kwire.metadata_v1_brokers(c)[0][0] == s["broker"].node_id


@pytest.mark.timeout(180)
def test_the_tokens_subject_is_the_principal_the_acls_see(setup):
    s = setup
    allow_alice(s, "oauth-topic")
    for key in s["keys"].values():
        conf = oauth_conf(s, key.token("alice"))
        assert sorted(round_trip(conf, "oauth-topic", n=3, group=f"oauth-{key.kid}")) == ["v0", "v1", "v2"]
    tls = oauth_conf(s, s["keys"]["ec"].token("alice"), tls=True)
    assert len(round_trip(tls, "oauth-topic", n=3, group="oauth-tls")) == 3
    # bob's token is as valid, but no ACL lets bob write.
    errors = []
    p = Producer(dict(oauth_conf(s, s["keys"]["rsa"].token("bob")), **{"message.timeout.ms": 10000}))
    p.produce("oauth-topic", b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors


@pytest.mark.timeout(120)
def test_kafka_python_logs_in_with_a_token_provider(setup):
    s = setup
    allow_alice(s, "oauth-kp")
    token = s["keys"]["ec"].token("alice")
    s["tokens"].append(token)

    class Provider(AbstractTokenProvider):
        def token(self):
            return token

    kp = {"bootstrap_servers": f"127.0.0.1:{s['broker'].sasl_port}",
          "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
          "sasl_oauth_token_provider": Provider()}
    p = KafkaProducer(**kp)
    p.send("oauth-kp", b"hello").get(20)
    p.close()
    c = KafkaConsumer("oauth-kp", group_id="oauth-kp", auto_offset_reset="earliest",
                      consumer_timeout_ms=1000, **kp)
    got = []
    try:
        wait_until(lambda: got.extend(m.value for m in c) or got, 30, "the record (kafka-python)")
    finally:
        c.close()
    assert got == [b"hello"]


def test_bad_tokens_get_the_challenge_then_sasl_authentication_failed(setup):
    s = setup
    rsa_key, ec_key = s["keys"]["rsa"], s["keys"]["ec"]
    impostor = Key("rsa-1", "RS256")  # the right kid, another key
    header = base64.urlsafe_b64encode(b'{"alg":"none","kid":"rsa-1"}').rstrip(b"=").decode()
    body = rsa_key.token("alice").split(".")[1]
    bad = {
        "wrong signature": impostor.token("alice"),
        "wrong audience": rsa_key.token("alice", aud="someone-else"),
        "wrong issuer": ec_key.token("alice", iss="https://evil.test"),
        "expired": ec_key.token("alice", lifetime=-3600),
        "alg none": f"{header}.{body}.",
        "unknown kid": Key("rsa-9", "RS256").token("alice"),
    }
    for what, token in bad.items():
        s["tokens"].append(token)
        t0 = time.monotonic()
        code, message, auth, closed = raw_login(s["broker"].sasl_port, initial_response(token))
        assert (code, auth, closed) == (SASL_AUTHENTICATION_FAILED, CHALLENGE, True), what
        assert message == CHALLENGE.decode(), (what, message)
        assert time.monotonic() - t0 >= 0.09, f"{what}: answered before the delay"
        still_serves(s)
    # Not RFC 7628 at all: refused at once.
    code, _, _, closed = raw_login(s["broker"].sasl_port, b"Bearer nothing")
    assert (code, closed) == (SASL_AUTHENTICATION_FAILED, True)
    # A Kafka client with a refused token reports the failure rather than hanging.
    with pytest.raises(KafkaException):
        conf = oauth_conf(s, bad["expired"])
        AdminClient(conf).list_topics(timeout=5)
    still_serves(s)
    log = s["broker"].log_path.read_text(errors="replace")
    assert "expired" in log and "not one of the expected audiences" in log


def test_rotating_the_key_set_file(setup):
    s = setup
    new = Key("ec-2", "ES256")
    token = new.token("alice")
    s["tokens"].append(token)
    assert raw_login(s["broker"].sasl_port, initial_response(token))[0] == SASL_AUTHENTICATION_FAILED
    # The old keys are retired and the new one published: the new kid's next login reads it.
    write_jwks(s["jwks"], [new])
    code, _, auth, _ = raw_login(s["broker"].sasl_port, initial_response(token))
    assert (code, auth) == (0, b"")
    old = s["keys"]["rsa"].token("alice")
    s["tokens"].append(old)
    assert raw_login(s["broker"].sasl_port, initial_response(old))[0] == SASL_AUTHENTICATION_FAILED


def test_gregor_admin_commands_log_in_with_a_token_file(setup):
    s = setup
    b, d = s["broker"], s["dir"]
    token_file = d / "admin.jwt"
    token = s["keys"]["rsa"].token("admin")
    s["tokens"].append(token)
    token_file.write_text(token + "\n")
    props = d / "oauth.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
                     f"sasl.oauthbearer.token.endpoint.url=file://{token_file}\n"
                     f"sasl.jaas.config={LOGIN_MODULE} required ;\n")
    topics = [gregor_bin(), "topics", "--bootstrap-server", f"127.0.0.1:{b.sasl_port}",
              "--command-config", str(props)]
    r = subprocess.run(topics + ["--create", "--topic", "made-with-a-token"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(topics + ["--list"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "made-with-a-token" in r.stdout.split(), r.stderr
    # An expired token in the file: a prompt, clear failure.
    expired = s["keys"]["rsa"].token("admin", lifetime=-3600)
    s["tokens"].append(expired)
    token_file.write_text(expired)
    t0 = time.monotonic()
    r = subprocess.run(topics + ["--list", "--timeout-ms", "30000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout
    assert "invalid_token" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 20
    assert signature(expired) not in r.stderr + r.stdout


class JwksServer:
    """A loopback HTTPS server answering GET /jwks with the key set last published."""

    def __init__(self, ca, keys):
        crt, key = ca.issue("jwks-server", "localhost")
        self.gets = 0
        self.publish(keys)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.gets += 1
                body = server.document if self.path == "/jwks" else b"{}"
                self.send_response(200 if self.path == "/jwks" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://localhost:{self.httpd.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, keys):
        self.document = json.dumps({"keys": [k.jwk for k in keys]}).encode()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def https_jwks_settings(url, truststore=None):
    settings = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": url,
        # Only an unknown key id (rate-limited) or a failure makes the broker fetch again here.
        "sasl.oauthbearer.jwks.endpoint.refresh.ms": "3600000",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "100",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "500",
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
    }
    if truststore:
        settings["sasl.jaas.config"] = (f'{LOGIN_MODULE} required ssl.truststore.type="PEM" '
                                        f'ssl.truststore.location="{truststore}";')
    return settings


@pytest.fixture
def https_setup(tmp_path):
    ca = Ca(tmp_path, "idp-ca")
    keys = {"rsa": Key("rsa-1", "RS256"), "ec": Key("ec-1", "ES256")}
    server = JwksServer(ca, keys.values())
    b = ListenersBroker(tmp_path, https_jwks_settings(server.url, ca.pem),
                        extra=("SASL_PLAINTEXT",), name="oauth-https")
    b.start()
    yield {"broker": b, "keys": keys, "server": server, "tokens": []}
    server.stop()
    assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"


def login(s, token):
    s["tokens"].append(token)
    code, _, auth, _ = raw_login(s["broker"].sasl_port, initial_response(token))
    return code if code else (0 if auth == b"" else auth)


@pytest.mark.timeout(120)
def test_https_jwks_keys_log_in_and_a_new_key_id_is_picked_up(https_setup):
    s = https_setup
    b, server = s["broker"], s["server"]
    assert server.gets == 1, "fetched once at start-up"
    for key in s["keys"].values():
        assert login(s, key.token("alice")) == 0, key.kid
    conf = {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER"}
    token = s["keys"]["rsa"].token("alice")
    s["tokens"].append(token)
    conf["oauth_cb"] = lambda _c: (token, time.time() + 600, "alice", {})
    assert len(AdminClient(conf).list_topics(timeout=20).brokers) == 1
    # The identity provider rotates: only ec-2 is served now. A token naming ec-2 makes the
    # broker fetch again; a later login with it succeeds, with no restart.
    new = Key("ec-2", "ES256")
    server.publish([new])
    wait_until(lambda: login(s, new.token("alice")) == 0, 20, "a login with the new key id")
    assert server.gets >= 2
    assert login(s, s["keys"]["rsa"].token("alice")) == SASL_AUTHENTICATION_FAILED
    log = b.log_path.read_text(errors="replace")
    assert "OAUTHBEARER JWKS fetched" in log and "ec-2" in log
    assert not [t for t in s["tokens"] if signature(t) in log]


@pytest.mark.timeout(120)
def test_the_endpoint_going_away_keeps_the_last_good_keys(https_setup):
    s = https_setup
    b, server = s["broker"], s["server"]
    server.stop()
    # An unknown key id wakes the fetcher, whose fetch now fails: logged, keys kept.
    assert login(s, Key("rsa-9", "RS256").token("alice")) == SASL_AUTHENTICATION_FAILED
    wait_until(lambda: "OAUTHBEARER JWKS not fetched; keeping the keys fetched before"
               in b.log_path.read_text(errors="replace"), 20, "the failed fetch in the log")
    for key in s["keys"].values():
        assert login(s, key.token("alice")) == 0, key.kid
    log = b.log_path.read_text(errors="replace")
    assert " ERROR " not in log, log[-3000:]
    with kwire.Conn("127.0.0.1", b.port) as c:
        assert kwire.metadata_v1_brokers(c)[0][0] == b.node_id


@pytest.mark.timeout(120)
def test_an_untrusted_endpoint_certificate_stops_start_up(tmp_path):
    idp_ca = Ca(tmp_path, "idp-ca")
    server = JwksServer(idp_ca, [Key("rsa-1", "RS256")])
    try:
        # No ssl.truststore.* in the JAAS line: the system's CAs, which never signed this one.
        b = ListenersBroker(tmp_path, https_jwks_settings(server.url),
                            extra=("SASL_PLAINTEXT",), name="oauth-untrusted")
        r = subprocess.run(b.argv(), capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert r.returncode != 0, r.stdout[-2000:]
        out = r.stdout + r.stderr
        assert "sasl.oauthbearer.jwks.endpoint.url" in out, out[-2000:]
        assert f"fetching the key set from {server.url}" in out, out[-2000:]
        assert "invalid peer certificate" in out and "UnknownIssuer" in out, out[-2000:]
    finally:
        server.stop()
