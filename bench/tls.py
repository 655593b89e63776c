#!/usr/bin/env python3
"""Produce and consume over TLS against plaintext, same broker, same run.

    python3 bench/tls.py [--gregor target/release/gregor] [--rounds 3] [--seconds 8] [--mb 256]

One `gregor broker` with a PLAINTEXT and an SSL listener (a P-256 certificate made here with
openssl, TLSv1.3, no client authentication). Each round runs, alternately over each listener:
`gregor bench produce` (8 partitions, 16 requests of 16 KiB batches in flight) and
`gregor bench consume --skip-kcat` (the Gregor consumer, fresh topics). Prints each run's JSON,
then the medians and the ratio TLS / plaintext. The broker's data directory is on --dir
(default: a temporary directory under /dev/shm, so the disk is not what is measured on
consume; produce still fsyncs).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(d):
    """A CA and the broker's key and certificate for 127.0.0.1; returns (keystore, ca)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-noenc",
            "-days", "2", "-subj", "/CN=bench-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-noenc",
            "-subj", "/CN=localhost", "-keyout", "broker.key", "-out", "broker.csr", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "broker.crt", cwd=d)
    keystore = os.path.join(d, "broker-keystore.pem")
    with open(keystore, "wb") as out:
        for part in ("broker.key", "broker.crt"):
            with open(os.path.join(d, part), "rb") as f:
                out.write(f.read())
    return keystore, os.path.join(d, "ca.pem")


def wait_listening(port, proc, log, deadline_s=60):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"broker exited: see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"broker not listening on {port} within {deadline_s}s: see {log}")


def run_json(argv):
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gregor", default="target/release/gregor")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gregor-tls-bench-", dir=a.dir or "/dev/shm")
    broker = None
    try:
        keystore, ca = make_certificates(work)
        plain, tls = free_port(), free_port()
        log = os.path.join(work, "broker.log")
        argv = [a.gregor, "broker", "--data-dir", os.path.join(work, "data"),
                "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
                "--override", f"ssl.keystore.location={keystore}"]
        broker = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        wait_listening(plain, broker, log)
        wait_listening(tls, broker, log)
        props = os.path.join(work, "client-ssl.properties")
        with open(props, "w") as f:
            f.write(f"security.protocol=SSL\nssl.ca.location={ca}\n")
        cases = {"plaintext": (plain, []), "tls": (tls, ["--command-config", props])}
        got = {("produce", name): [] for name in cases}
        for r in range(a.rounds):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in order:
                port, extra = cases[name]
                p = run_json([a.gregor, "bench", "produce", "--bootstrap-server",
                              f"127.0.0.1:{port}", "--topic", f"tls-bench-{name}-{r}",
                              "--seconds", str(a.seconds), "--raw-dir", work, "--json", *extra])
                print(json.dumps({"round": r, "case": name, "produce": p}), flush=True)
                got[("produce", name)].append(p[0]["mb_per_s"])
            for name in order:
                port, extra = cases[name]
                c = run_json([a.gregor, "bench", "consume", "--bootstrap-server",
                              f"127.0.0.1:{port}", "--topic", f"tls-bench-c-{name}-{r}",
                              "--partitions", "1,8", "--mb", str(a.mb), "--skip-kcat",
                              "--raw-dir", work, "--broker-pid", str(broker.pid), "--json",
                              *extra])
                print(json.dumps({"round": r, "case": name, "consume": c}), flush=True)
                for case in c:
                    key = (f"consume-{case['partitions']}p", name)
                    got.setdefault(key, []).append(case["gregor"]["mb_per_s"])
                    cpu = case["gregor"]["broker_cpu_s_per_gb"]
                    if cpu is not None:
                        got.setdefault((f"broker-cpu-s-per-gb-{case['partitions']}p", name),
                                       []).append(cpu)
        summary = {}
        for kind in sorted({k for k, _ in got if k != "consume"}):
            p = statistics.median(got[(kind, "plaintext")])
            t = statistics.median(got[(kind, "tls")])
            summary[kind] = {"plaintext": got[(kind, "plaintext")], "tls": got[(kind, "tls")],
                             "median_ratio_tls_to_plaintext": round(t / p, 3)}
        print(json.dumps({"summary": summary}, indent=1))
    finally:
        if broker is not None:
            broker.terminate()
            try:
                broker.wait(20)
            except subprocess.TimeoutExpired:
                broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
