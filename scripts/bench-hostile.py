#!/usr/bin/env python3
"""Hostile input at the size limit against the real daemon's ingest socket.

Starts the sandbox and the daemon (binaries from BIN_DIR), then:
  1. valid deliveries alone (track requests, one at a time): their latency;
  2. a storm: CONCURRENCY clients sending unsigned or wrongly signed bodies of max_body_bytes (arrays of objects,
     deep nesting, many keys, long strings, huge numbers, invalid UTF-8) to every route, with the same valid
     deliveries interleaved: their latency, the daemon's peak RSS and every answer's status;
  3. the RSS once the storm is over.
Prints the figures next to their references (the body size, the latency without the storm) and the ratios.
Usage: scripts/bench-hostile.py BIN_DIR [--seconds S] [--concurrency C]
"""
import argparse
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BODY_BYTES = 1 << 20


def hostile_bodies(size):
    """One body of each shape, each as close to `size` bytes as the shape allows."""
    def fill(head, unit, tail):
        count = (size - len(head) - len(tail)) // len(unit)
        return head + unit * count + tail

    objects = fill(b"[", b'{"a":1,"b":2},', b"{}]")
    deep = b"[" * (size // 2) + b"]" * (size // 2)
    keys = b"{" + b",".join(b'"k%07d":0' % i for i in range((size - 2) // 13)) + b"}"
    string = fill(b'{"order_id":"', b"x", b'","event_type":"FRAUD_RISK_ACCEPTED"}')
    number = fill(b'{"amount":', b"9", b"}")
    invalid = fill(b'{"order_id":"', b"\xff\xfe", b'"}')
    return {"array_of_objects": objects, "deep_nesting": deep, "many_keys": keys, "long_string": string,
            "huge_number": number, "invalid_utf8": invalid}


def request(path, method, target, body, headers=()):
    """One HTTP/1.1 request over the unix socket; returns (status, seconds)."""
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(path)
        head = [f"{method} {target} HTTP/1.1", "Host: localhost", f"Content-Length: {len(body)}",
                "Content-Type: application/json", "Connection: close"] + [f"{k}: {v}" for k, v in headers]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        answer = b""
        while b"\r\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, time.monotonic() - started


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000 if ordered else float("nan")


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    sys.exit(f"bench-hostile: {what} did not happen within {seconds} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("BENCH_HOSTILE_SECONDS", 20)))
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("BENCH_HOSTILE_CONCURRENCY", 64)))
    parser.add_argument("--max-connections", type=int, default=256)
    args = parser.parse_args()
    binary = os.path.abspath(os.path.join(args.bin_dir, "klarna-reconciler"))
    folder = tempfile.mkdtemp(prefix="klarna-bench-hostile-")
    processes = []
    try:
        port = 18400 + os.getpid() % 500
        # The sandbox is its own binary (klarna-sandbox), beside the daemon's.
        sandbox_binary = os.path.abspath(os.path.join(args.bin_dir, "klarna-sandbox"))
        sandbox = subprocess.Popen([sandbox_binary, "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(sandbox)

        def sandbox_up():
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_sandbox/clock", timeout=1)
                return True
            except OSError:
                return False

        wait_for(sandbox_up, 10, "the sandbox start")
        for name, text in [("klarna-password", "sandbox-secret"), ("callback-key", "bench-callback-key-0123456789"),
                           ("signing-keys.json", json.dumps({"krn:key:1": "bench-signing-key"}))]:
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(text + "\n")
        with open(os.path.join(folder, "config.yaml"), "w") as handle:
            handle.write(f"""klarna:
  base_url: http://127.0.0.1:{port}
  username: sandbox-merchant
  password_file: klarna-password
store:
  path: state.sqlite
outbox:
  dir: outbox
ingest:
  socket: ingest.sock
  spool_dir: ""
  max_body_bytes: {BODY_BYTES}
  max_connections: {args.max_connections}
callback_token:
  key_file: callback-key
webhook_signing:
  keys_file: signing-keys.json
rate_limit:
  requests_per_second: 2000
  burst: 200
log:
  level: warning
""")
        daemon = subprocess.Popen([binary, "run", "--config", "config.yaml"], cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(daemon)
        ingest = os.path.join(folder, "ingest.sock")
        wait_for(lambda: os.path.exists(ingest) and request(ingest, "GET", "/v1/ready", b"")[0] == 200, 30, "the daemon's readiness")

        counter = iter(range(10**9))

        def valid_delivery():
            n = next(counter)
            body = json.dumps({"hpp_session_id": f"bench-hpp-{n}", "kp_session_id": f"bench-kp-{n}", "capture": "never"}).encode()
            return request(ingest, "POST", "/v1/sessions", body)

        def valid_run(seconds, stop=None):
            latencies, statuses = [], {}
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not (stop and stop.is_set()):
                status, elapsed = valid_delivery()
                statuses[status] = statuses.get(status, 0) + 1
                latencies.append(elapsed)
            return latencies, statuses

        time.sleep(2)  # let start-up allocations settle before the idle figure
        idle = rss_kib(daemon.pid)
        quiet_latencies, quiet_statuses = valid_run(min(10.0, args.seconds / 2))

        bodies = hostile_bodies(BODY_BYTES)
        targets = [("/v1/webhooks/klarna", [("Klarna-Signature", "00" * 32), ("Klarna-Signing-Key-Id", "krn:key:1")]),
                   ("/v1/webhooks/klarna", []),
                   ("/v1/webhooks/hpp-status?kp_session_id=kp&token=forged", []),
                   ("/v1/webhooks/kp-authorization?kp_session_id=kp&token=forged", []),
                   ("/v1/webhooks/om-notification", []),
                   ("/v1/sessions", []),
                   ("/v1/orders/o-1/capture", [])]
        stop = threading.Event()
        storm_statuses, lock = {}, threading.Lock()
        sent = [0]

        def attacker(index):
            shapes = list(bodies.items())
            i = index
            while not stop.is_set():
                shape, body = shapes[i % len(shapes)]
                target, headers = targets[(i // len(shapes)) % len(targets)]
                try:
                    status, _ = request(ingest, "POST", target, body, headers)
                except OSError as error:
                    status = f"error {error.__class__.__name__}"
                with lock:
                    storm_statuses[status] = storm_statuses.get(status, 0) + 1
                    sent[0] += 1
                i += args.concurrency

        peak = [idle]

        def sampler():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(daemon.pid))
                time.sleep(0.02)

        threads = [threading.Thread(target=attacker, args=(i,)) for i in range(args.concurrency)] + [threading.Thread(target=sampler)]
        for thread in threads:
            thread.start()
        storm_latencies, storm_valid_statuses = valid_run(args.seconds)
        stop.set()
        for thread in threads:
            thread.join()
        peak[0] = max(peak[0], rss_kib(daemon.pid, "VmHWM"))
        time.sleep(3)
        after = rss_kib(daemon.pid)
        alive = daemon.poll() is None

        per_request = (peak[0] - idle) / args.concurrency
        print(f"== hostile input at the size limit: {args.concurrency} concurrent clients, {args.seconds:.0f} s, bodies of {BODY_BYTES // 1024} KiB "
              f"({', '.join(bodies)}), unsigned or wrongly signed, to every ingest route; ingest.max_connections {args.max_connections}")
        print(f"{'figure':44} {'value':>12} {'reference':>12} {'ratio':>8}")
        print(f"{'RSS per concurrent hostile request (KiB)':44} {per_request:12.0f} {BODY_BYTES / 1024:12.0f} {per_request / (BODY_BYTES / 1024):8.2f}   (reference: the body size)")
        print(f"{'peak RSS during the storm (MiB)':44} {peak[0] / 1024:12.1f} {idle / 1024:12.1f} {peak[0] / max(idle, 1):8.2f}   (reference: idle)")
        print(f"{'RSS after the storm (MiB)':44} {after / 1024:12.1f} {idle / 1024:12.1f} {after / max(idle, 1):8.2f}   (reference: idle; goal within 64 MiB)")
        q99, s99 = percentile(quiet_latencies, 0.99), percentile(storm_latencies, 0.99)
        print(f"{'valid delivery p99 latency (ms)':44} {s99:12.2f} {q99:12.2f} {s99 / q99:8.2f}   (reference: no storm)")
        print(f"{'valid delivery p50 latency (ms)':44} {percentile(storm_latencies, 0.5):12.2f} {percentile(quiet_latencies, 0.5):12.2f} {percentile(storm_latencies, 0.5) / percentile(quiet_latencies, 0.5):8.2f}")
        print(f"valid deliveries: {len(storm_latencies)} during the storm {storm_valid_statuses}, {len(quiet_latencies)} without {quiet_statuses}")
        print(f"hostile requests answered: {sent[0]} {dict(sorted((str(k), v) for k, v in storm_statuses.items()))}")
        print(f"daemon still running: {'yes' if alive else 'NO'}")
        bad = [s for s in storm_valid_statuses if s != 202] + [s for s in storm_statuses if s in (0, 502) or isinstance(s, str)]
        if not alive or bad:
            sys.exit(f"bench-hostile: failures {bad}, daemon alive: {alive}")
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
