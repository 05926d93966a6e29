#!/usr/bin/env python3
"""Soak under faults (issue 25): mixed traffic for --minutes with a fault on the source link every
--fault-every seconds, verified at the end. Not part of CI.

  1. A source cluster whose brokers are advertised through a fault relay (`kafka-harness up
     --relayed true`), a destination cluster, the kafka-mirror-proxy binary with proxy.yaml's
     defaults, a mirror made with kafka-mirrors of two topics (`soak.plain`, 6 partitions, and
     `soak.txn`, 3), with the mirror's source connection through the relay.
  2. Three producers on the source for the whole run (librdkafka): plain lz4 with acks=1,
     idempotent zstd, transactional gzip (transactions of 20 records, one in five aborted).
  3. Every --fault-every seconds one fault for --fault-seconds, in turn: cut, black hole, 200 ms
     latency with 1% of connections reset per second, half-open; then healed.
  4. Every 5 s: the proxy's resident memory and the mirror's lag (records, seconds) from /metrics.
  5. At the end: producers stopped, the copy awaited, `kafka-mirrors --verify --json` over every
     partition. Lost, duplicated or moved records show as DIFFERENT partitions there.

Report: BENCH_OUT/soak.md (Markdown) and soak.json (every sample).

    python3 benches/faults/soak.py                     # 30 minutes, a fault every 3 minutes
    python3 benches/faults/soak.py --minutes 5 --fault-every 60
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benches" / "proxy"))
sys.path.insert(0, str(ROOT / "benches" / "replicator"))
import benchlib  # noqa: E402
import scale  # noqa: E402  (its clusters, proxy and metrics helpers)

log = benchlib.logger("soak")
TARGET = benchlib.TARGET
MIRROR = "soak"
TOPICS = [("soak.plain", 6), ("soak.txn", 3)]
FAULTS = ["cut", "black-hole", "lossy", "half-open"]


class Relay:
    """The source cluster of `kafka-harness up --relayed true` and its relay's command line."""

    def __init__(self, procs, name):
        cmd = [str(TARGET / "release/kafka-harness"), "up", "--name", name, "--version", benchlib.VERSION, "--relayed", "true"]
        for o in scale.BROKER_JVM:
            cmd += ["--jvm-opt", o]
        for p in scale.BROKER_PROPS:
            cmd += ["--prop", p]
        self.proc = procs.start(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.bootstrap = self.relayed = None
        for line in self.proc.stdout:
            if line.startswith("bootstrap="):
                self.bootstrap = line.strip().split("=", 1)[1]
            elif line.startswith("relayed_bootstrap="):
                self.relayed = line.strip().split("=", 1)[1]
            elif line.startswith("running"):
                break
        if not (self.bootstrap and self.relayed):
            raise SystemExit("the harness did not start a relayed cluster")

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer.startswith("ok"):
            raise SystemExit(f"relay command {line!r}: {answer}")
        return answer


class Producers:
    """The three producers, each in a thread, until stop()."""

    def __init__(self, bootstrap):
        from confluent_kafka import Producer
        self.stopping = threading.Event()
        self.acked = {"plain": 0, "idempotent": 0, "txn-committed": 0, "txn-aborted": 0}
        self.errors = {"plain": 0, "idempotent": 0, "txn": 0}
        self.lock = threading.Lock()
        self.threads = []
        plain = Producer({"bootstrap.servers": bootstrap, "acks": "1", "compression.type": "lz4", "linger.ms": 5})
        idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "zstd", "linger.ms": 5})
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"soak-{os.getpid()}", "compression.type": "gzip", "linger.ms": 5})
        txn.init_transactions(60)
        for name, target in [("plain", lambda: self.simple(plain, "plain")), ("idempotent", lambda: self.simple(idem, "idempotent")),
                             ("txn", lambda: self.transactional(txn))]:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self.threads.append(t)

    def delivered(self, name):
        def cb(err, _msg):
            with self.lock:
                if err is None:
                    self.acked[name] += 1
                else:
                    self.errors[name] += 1
        return cb

    def simple(self, p, name):
        i = 0
        while not self.stopping.is_set():
            for _ in range(50):
                p.produce("soak.plain", key=f"{name}-{i}".encode(), value=(f"{name}-{i}-" + "x" * (i % 900)).encode(),
                          headers=[("i", str(i).encode())], on_delivery=self.delivered(name))
                i += 1
            p.poll(0)
            time.sleep(0.1)
        p.flush(60)

    def transactional(self, p):
        i = n = 0
        while not self.stopping.is_set():
            p.begin_transaction()
            for _ in range(20):
                p.produce("soak.txn", key=f"t-{i}".encode(), value=(f"t-{i}-" + "y" * (i % 700)).encode())
                i += 1
            try:
                if n % 5 == 4:
                    p.abort_transaction(60)
                    with self.lock:
                        self.acked["txn-aborted"] += 20
                else:
                    p.commit_transaction(60)
                    with self.lock:
                        self.acked["txn-committed"] += 20
            except Exception as e:  # noqa: BLE001 (counted and reported)
                log(f"  transaction failed: {e}")
                with self.lock:
                    self.errors["txn"] += 1
                p.abort_transaction(60)
            n += 1
            time.sleep(0.2)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(120)


def behind(source, dest):
    """Records the destination lacks, summed over partitions, from both clusters' high watermarks
    read directly (not through the relay, not from the proxy's metrics, which cannot see what the
    source got while it is cut off); None if either side did not answer."""
    a = scale.end_offsets(source, TOPICS, attempts=1)
    b = scale.end_offsets(dest, TOPICS, attempts=1)
    if a is None or b is None:
        return None
    return sum(max(0, a[k] - b.get(k, 0)) for k in a)


def sample(copier, metrics, source, dest):
    return {"t": time.time(), "rss_mib": scale.rss_mib(copier.pid), "behind_records": behind(source, dest),
            "lag_records": scale.metric(metrics, "kafka_mirror_proxy_mirror_lag_records", {"mirror": MIRROR}),
            "lag_seconds": scale.metric(metrics, "kafka_mirror_proxy_mirror_lag_seconds", {"mirror": MIRROR}),
            "staleness_seconds": scale.metric(metrics, "kafka_mirror_proxy_mirror_source_staleness_seconds", {"mirror": MIRROR})}


def start_fault(relay, kind):
    if kind == "lossy":
        relay.command("latency 200")
        relay.command("reset-rate 0.01")
    else:
        relay.command(kind)


def heal(relay):
    relay.command("latency 0")
    relay.command("reset-rate 0")
    return relay.command("heal")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--fault-every", type=int, default=180, help="seconds between the starts of two faults")
    parser.add_argument("--fault-seconds", type=int, default=30)
    parser.add_argument("--catch-up-timeout", type=int, default=600)
    args = parser.parse_args()
    scale.in_venv()
    log("building release binaries")
    benchlib.run(["cargo", "build", "-q", "--release", "-p", "kafka-harness", "-p", "kafka-mirror-proxy",
                  "--bin", "kafka-harness", "--bin", "kafka-mirror-proxy", "--bin", "kafka-mirrors"], timeout=3600)
    out_dir = Path(os.environ.get("BENCH_OUT", ROOT / "target" / "bench-soak" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = benchlib.run(["git", "rev-parse", "HEAD"]).strip()
    log(f"commit {commit}, {os.cpu_count()} cores; results in {out_dir}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    procs = scale.Processes()
    samples, faults = [], []
    try:
        relay = Relay(procs, "soak-src")
        _, dest = scale.start_cluster(procs, "soak-dst", ["transaction.partition.verification.enable=false"])
        scale.create_topics(relay.bootstrap, TOPICS)
        copier, proxy, metrics = scale.start_proxy(procs, dest, out_dir)
        (out_dir / "mirror.properties").write_text(f"bootstrap.servers={relay.relayed}\n")
        scale.kafka_mirrors(proxy, "--create", "--mirror", MIRROR, "--mirror-config", str(out_dir / "mirror.properties"))
        scale.kafka_mirrors(proxy, "--add", "--mirror", MIRROR, "--topic", "soak\\..*")
        producers = Producers(relay.bootstrap)
        start, start_wall = time.monotonic(), time.time()
        end = start + args.minutes * 60
        next_fault, k = start + args.fault_every / 2, 0
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_fault and now + args.fault_seconds < end:
                kind = FAULTS[k % len(FAULTS)]
                k += 1
                f = {"kind": kind, "start_s": now - start}
                log(f"  fault {kind} at {f['start_s']:.0f} s")
                start_fault(relay, kind)
                f["behind_peak"], f["staleness_peak_s"], f["metric_lag_peak_s"] = 0, 0.0, 0.0

                def track(s):
                    samples.append(s)
                    f["behind_peak"] = max(f["behind_peak"], s["behind_records"] or 0)
                    f["staleness_peak_s"] = max(f["staleness_peak_s"], s["staleness_seconds"] or 0.0)
                    f["metric_lag_peak_s"] = max(f["metric_lag_peak_s"], s["lag_seconds"] or 0.0)

                while time.monotonic() < now + args.fault_seconds:
                    track(sample(copier, metrics, relay.bootstrap, dest))
                    time.sleep(5)
                f["relay"] = heal(relay)
                healed = time.monotonic()
                # Caught up: the destination holds everything the source held when the link healed.
                at_heal = scale.end_offsets(relay.bootstrap, TOPICS)
                f["caught_up_after_heal_s"] = None
                while time.monotonic() < healed + 300:
                    track(sample(copier, metrics, relay.bootstrap, dest))
                    d = scale.end_offsets(dest, TOPICS, attempts=1)
                    if at_heal is not None and d is not None and all(d[k] >= v for k, v in at_heal.items()):
                        f["caught_up_after_heal_s"] = time.monotonic() - healed
                        break
                    time.sleep(1)
                log(f"  healed; {f['behind_peak']} records behind at the peak, source staleness peak {f['staleness_peak_s']:.1f} s, "
                    f"caught up {f['caught_up_after_heal_s']} s after healing")
                faults.append(f)
                next_fault = now + args.fault_every
                continue
            samples.append(sample(copier, metrics, relay.bootstrap, dest))
            time.sleep(5)
        producers.stop()
        log(f"  producers stopped: acknowledged {producers.acked}, errors {producers.errors}")
        topics = TOPICS
        src_ends = scale.end_offsets(relay.bootstrap, topics)
        scale.wait_until(lambda: scale.end_offsets(dest, topics, attempts=1) == src_ends, args.catch_up_timeout, "the copy caught up", poll=2)
        r = subprocess.run([str(TARGET / "release/kafka-mirrors"), "--bootstrap-server", proxy, "--verify", "--mirror", MIRROR, "--json"],
                           capture_output=True, text=True, timeout=1800)
        verify, verify_code = r.stdout, r.returncode
        rows = json.loads(verify)
        result = {
            "commit": commit, "minutes": args.minutes, "fault_seconds": args.fault_seconds, "start_wall": start_wall, "acked": producers.acked, "producer_errors": producers.errors,
            "verify_exit": verify_code, "partitions": len(rows),
            "identical": sum(1 for r in rows if r["result"] == "IDENTICAL"),
            "different": [r for r in rows if r["result"] != "IDENTICAL"],
            "records_compared": sum(r["records"] for r in rows), "markers_compared": sum(r["markers"] for r in rows),
            "faults": faults, "samples": samples,
        }
        (out_dir / "soak.json").write_text(json.dumps(result, indent=2))
        report = render(result, " ".join(sys.argv))
        (out_dir / "soak.md").write_text(report + "\n")
        print(report)
    finally:
        procs.stop_all()


def render(r, command):
    rss = [s["rss_mib"] for s in r["samples"] if s["rss_mib"]]
    t0 = r["start_wall"]
    heals = [(f["start_s"], f["start_s"] + r["fault_seconds"] + 30 + (f["caught_up_after_heal_s"] or 300)) for f in r["faults"]]
    quiet = [s for s in r["samples"] if not any(a <= s["t"] - t0 <= b for a, b in heals)]
    tenth = max(1, len(rss) // 10)
    lines = [f"Commit {r['commit']}; `{command}`", "",
             f"- Records acknowledged by the source: {r['acked']}; producer errors {r['producer_errors']}.",
             f"- `kafka-mirrors --verify`: {r['identical']} of {r['partitions']} partitions identical "
             f"({r['records_compared']} records and {r['markers_compared']} markers compared), exit {r['verify_exit']}; "
             f"different or unreadable: {[(d['topic'], d['partition'], d['firstDifferingOffset'], d['detail']) for d in r['different']]}.",
             f"- Proxy RSS (MiB): first tenth of the run mean {sum(rss[:tenth]) / tenth:.0f}, last tenth {sum(rss[-tenth:]) / tenth:.0f}, "
             f"max {max(rss):.0f} ({len(rss)} samples every 5 s)." if rss else "- Proxy RSS: no samples.",
             "- Between faults: records behind (both clusters' high watermarks read directly) "
             f"max {max([s['behind_records'] or 0 for s in quiet] or [0])}, source staleness max {max([s['staleness_seconds'] or 0 for s in quiet] or [0]):.1f} s "
             f"({len(quiet)} samples more than 30 s after a heal).",
             "", "| fault | start (s) | records behind, peak | proxy's lag metric, peak (s) | source staleness metric, peak (s) | caught up after healing (s) | relay after healing |",
             "|---|---|---|---|---|---|---|"]
    for f in r["faults"]:
        caught = "not within 300" if f["caught_up_after_heal_s"] is None else f"{f['caught_up_after_heal_s']:.1f}"
        lines.append(f"| {f['kind']} | {f['start_s']:.0f} | {f['behind_peak']} | {f['metric_lag_peak_s']:.1f} | {f['staleness_peak_s']:.1f} | {caught} | {f['relay']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
