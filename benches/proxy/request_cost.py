#!/usr/bin/env python3
"""Instructions per request of kafka-mirror-proxy under a fixed load, counted by valgrind's callgrind.

    python3 benches/proxy/request_cost.py [--requests 3000] [--in-flight 1] [--record-size 1024]
                                          [--no-build] [--annotate target/bench/callgrind.txt]

Instruction counts are repeatable on a loaded machine (unlike times), so this is how a change to the
proxy's per-request path is judged: run it before and after, compare "instructions per Produce".

1. Builds the release proxy (unless --no-build); starts a 1-broker destination with the test harness
   (`kafka-harness up`) unless KMP_DEST_BOOTSTRAP names a running one; creates a 1-partition topic.
2. Starts the proxy under `valgrind --tool=callgrind` (metadata refresh every 10 minutes, so the
   background task stays out of the window).
3. Sends --warmup Produce requests (not counted), zeroes callgrind's counters (`callgrind_control
   -z`), sends --requests Produce requests (v13 by default, topic by id, as Kafka 4.x Java producers
   send; --produce-version 12 names the topic) of one record each (acks=1, like a producer with
   linger.ms=0 at low rate) over one connection with --in-flight outstanding, checks every response
   (error code 0, offsets in sequence), then dumps the counters (`callgrind_control -d`).
4. Prints the instructions per request of the window (everything the proxy did, its idle timers
   included) and, with --annotate, writes callgrind_annotate's inclusive profile of the window.

The client is this script (plain sockets, no Kafka library), so nothing but the proxy runs under
valgrind. Stops everything it started.
"""

import argparse
import base64
import os
import re
import socket
import struct
import subprocess
import time
from pathlib import Path

from benchlib import LIBS, ROOT, TARGET, VERSION, create_topic, free_port, logger, run, stop_all, wait_healthy

JAVA = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{LIBS}/*"]


log = logger("request_cost")




# --- Kafka wire format, just enough for Produce v12 and v13 (flexible versions, KIP-482) ---------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n):
    return uvarint((n << 1) ^ (n >> 63))


def record_batch(value):
    """A magic-2 batch of one record (no key, no headers), CreateTime now."""
    ts = int(time.time() * 1000)
    body = bytes([0]) + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, 0, ts, ts, -1, -1, -1, 1) + record
    after_len = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_len)) + after_len


def produce_request(version, correlation_id, topic, batch):
    """Produce v12 (topic by name) or v13 (by topic id, KIP-516); `topic` is (name, id bytes)."""
    name, topic_id = topic
    header = struct.pack(">hhi", 0, version, correlation_id) + struct.pack(">h", 5) + b"bench" + uvarint(0)
    topic_ref = topic_id if version >= 13 else uvarint(len(name) + 1) + name.encode()
    body = (uvarint(0) + struct.pack(">hi", 1, 30000)  # transactional_id null, acks=1, timeout
            + uvarint(2) + topic_ref  # one topic
            + uvarint(2) + struct.pack(">i", 0) + uvarint(len(batch) + 1) + batch + uvarint(0)  # partition 0
            + uvarint(0) + uvarint(0))
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise SystemExit("the proxy closed the connection")
        buf += chunk
    return bytes(buf)


def read_uvarint(buf, pos):
    shift, value = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def produce_response(sock, version):
    """(correlation_id, error_code, base_offset) of a one-partition Produce v12/v13 response."""
    (size,) = struct.unpack(">i", read_exact(sock, 4))
    frame = read_exact(sock, size)
    (cid,) = struct.unpack(">i", frame[:4])
    pos = 4
    _, pos = read_uvarint(frame, pos)  # header tagged fields (empty)
    _, pos = read_uvarint(frame, pos)  # responses: 1 + 1
    if version >= 13:
        pos += 16  # topic id
    else:
        name_len, pos = read_uvarint(frame, pos)
        pos += name_len - 1
    _, pos = read_uvarint(frame, pos)  # partitions: 1 + 1
    _index, error, base_offset = struct.unpack(">ihq", frame[pos:pos + 14])
    return cid, error, base_offset


def send_produces(addr, topic, version, count, in_flight, size, first_cid):
    host, port = addr.rsplit(":", 1)
    value = b"x" * size
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent, received, last_offset = 0, 0, None
        while received < count:
            while sent < count and sent - received < in_flight:
                sock.sendall(produce_request(version, first_cid + sent, topic, record_batch(value)))
                sent += 1
            cid, error, offset = produce_response(sock, version)
            if cid != first_cid + received or error != 0:
                raise SystemExit(f"response {received}: correlation id {cid} (expected {first_cid + received}), error {error}")
            if last_offset is not None and offset != last_offset + 1:
                raise SystemExit(f"response {received}: offset {offset} after {last_offset}")
            last_offset = offset
            received += 1



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Needs valgrind (apt-get install valgrind), Java 17+ and Maven (for the harness).")
    ap.add_argument("--requests", type=int, default=3000, help="Produce requests in the counted window")
    ap.add_argument("--warmup", type=int, default=300, help="Produce requests before the window")
    ap.add_argument("--in-flight", type=int, default=1, help="requests outstanding on the connection")
    ap.add_argument("--record-size", type=int, default=1024, help="bytes of the one record of each request")
    ap.add_argument("--produce-version", type=int, default=13, choices=[12, 13],
                    help="13 names the topic by id, as Kafka 4.x Java producers do; 12 by name, as older clients")
    ap.add_argument("--no-build", action="store_true", help="use the release binary as it is")
    ap.add_argument("--binary", help="the proxy binary to measure (default: the release build, target/release/kafka-mirror-proxy)")
    ap.add_argument("--annotate", help="write callgrind_annotate's inclusive profile of the window to this file")
    args = ap.parse_args()

    if not args.no_build:
        log("building the release proxy")
        run(["cargo", "build", "--release", "--quiet", "--bin", "kafka-mirror-proxy", "-p", "kafka-mirror-proxy"])
    started = []
    out_dir = ROOT / "target" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        bootstrap = os.environ.get("KMP_DEST_BOOTSTRAP")
        if not bootstrap:
            log("starting a 1-broker destination")
            # The harness's own speed does not matter here: its debug build is quicker to make.
            run(["cargo", "build", "--quiet", "-p", "kafka-harness"])
            cluster = subprocess.Popen([str(TARGET / "debug/kafka-harness"), "up", "--name", "reqcost", "--version", VERSION],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
            started.append(cluster)
            for line in cluster.stdout:
                if line.startswith("bootstrap="):
                    bootstrap = line.strip().split("=", 1)[1]
                    break
            if not bootstrap:
                raise SystemExit("the harness did not start a cluster")
        name = f"reqcost-{int(time.time())}"
        create_topic(JAVA, bootstrap, name, 1)
        described = run(JAVA + ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--describe", "--topic", name])
        m = re.search(r"TopicId:\s*(\S+)", described)
        if not m:
            raise SystemExit(f"no topic id in:\n{described}")
        topic = (name, base64.urlsafe_b64decode(m[1] + "=="))  # Kafka prints Uuids in URL-safe base64
        port, metrics = free_port(), free_port()
        env = dict(os.environ, RUST_LOG="warn", KMP_PROXY__LISTEN=f"127.0.0.1:{port}", KMP_PROXY__BROKER_PORT_BASE="0",
                   KMP_MIRRORS__ENABLED="false", KMP_DESTINATION__METADATA_REFRESH_INTERVAL_MS="600000",
                   KMP_DESTINATION__BOOTSTRAP_SERVERS=bootstrap, KMP_ADMIN__METRICS_LISTEN=f"127.0.0.1:{metrics}")
        out_file = out_dir / "callgrind.out.%p"
        proxy = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
                                  args.binary or str(TARGET / "release/kafka-mirror-proxy"), "--config", str(ROOT / "proxy.yaml")],
                                 env=env, cwd=ROOT, stderr=subprocess.DEVNULL)
        started.append(proxy)
        wait_healthy(f"http://127.0.0.1:{metrics}/health", 180)
        via = f"127.0.0.1:{port}"
        log(f"warm-up: {args.warmup} requests")
        send_produces(via, topic, args.produce_version, args.warmup, args.in_flight, args.record_size, 1)
        dump = Path(str(out_file).replace("%p", str(proxy.pid)))
        for old in out_dir.glob(f"{dump.name}*"):
            old.unlink()
        run(["callgrind_control", "-z", str(proxy.pid)])
        log(f"window: {args.requests} requests, {args.in_flight} in flight")
        t0 = time.monotonic()
        send_produces(via, topic, args.produce_version, args.requests, args.in_flight, args.record_size, 1_000_000)
        elapsed = time.monotonic() - t0
        run(["callgrind_control", "-d", "window", str(proxy.pid)])
        dumps = sorted(out_dir.glob(f"{dump.name}.*"))
        if not dumps:
            raise SystemExit("callgrind wrote no dump")
        text = dumps[-1].read_text(errors="replace")
        m = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
        if not m:
            raise SystemExit(f"no totals in {dumps[-1]}")
        total = int(m[1])
        if args.annotate:
            annotated = run(["callgrind_annotate", "--inclusive=yes", "--threshold=99", str(dumps[-1])])
            Path(args.annotate).write_text(annotated)
            log(f"profile written to {args.annotate}")
        print(f"instructions in the window: {total}")
        print(f"instructions per Produce request: {total / args.requests:.0f} "
              f"({args.requests} requests of {args.record_size} B, {args.in_flight} in flight, {elapsed:.1f} s under valgrind)")
    finally:
        stop_all(started, timeout=120)


if __name__ == "__main__":
    main()
