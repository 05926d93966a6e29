#!/usr/bin/env python3
"""Replicator at real-cluster scale (issue 26): the product's path (the kafka-mirror-proxy binary,
the mirror created with kafka-mirrors) side by side with MirrorMaker 2, at several partition counts.

For each size (partitions, in topics of --partitions-per-topic):
  1. a fresh source cluster; the topics created and --records-per-partition records written to every
     partition (librdkafka);
  2. for each path (proxy, then mm2), a fresh destination cluster and the copier started:
     - time until every partition is MIRRORING (proxy: `kafka_mirror_proxy_mirror_partitions` of
       /metrics, from the mirror state log) and until every destination end offset equals the
       source's (both paths; for MirrorMaker 2, which has no states, the only figure; its destination
       topics are created beforehand, see --mm2-precreate);
     - end-to-end lag of single records written to random idle partitions (--probes of them, one at a
       time: from the source's acknowledgement until the destination partition's high watermark is
       past it), p50 / p99 / max in an HdrHistogram;
     - the copier's CPU over --idle-seconds with nothing written, and its resident memory;
     - (proxy) what a scrape of /metrics costs: page size, sample lines, time of 10 scrapes in a row.
Then a table (Markdown, stdout and BENCH_OUT/scale.md) and the raw figures (scale.json).

Usage (from the repository root; release builds of kafka-harness, kafka-mirror-proxy and kafka-mirrors
are made first; Kafka and MirrorMaker 2 come from Maven Central):

    python3 benches/replicator/scale.py                      # 100, 1000, 10000 partitions, both paths
    python3 benches/replicator/scale.py --sizes 1000 --paths proxy --probes 50

Brokers run with Kafka's own JVM defaults for a broker (1 GiB heap, G1) rather than the test
harness's start-up options. The machine is shared by both brokers, the copier and the probes: CPU
figures are the copier's own (/proc/PID/stat), the lag is what a consumer sees.
"""

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benches" / "proxy"))
import benchlib  # noqa: E402

log = benchlib.logger("scale")
TARGET = benchlib.TARGET
VENV_PYTHON = ROOT / "target" / "py-venv" / "bin" / "python"
MM2_VERSION = os.environ.get("MM2_VERSION", "4.3.1")
MM2_LIBS = ROOT / "target" / "kafka" / f"mm2-{MM2_VERSION}" / "libs"
BROKER_JVM = ["-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
              "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true"]
# Every broker: many partitions on one node; nothing deleted while measured.
BROKER_PROPS = ["log.segment.delete.delay.ms=0", "num.partitions=1", "auto.create.topics.enable=false",
                "log.retention.ms=-1", "group.initial.rebalance.delay.ms=0"]
MIRROR = "scale"


def in_venv():
    """Re-runs this script with the harness's Python venv (confluent-kafka), adding hdrhistogram."""
    if Path(sys.prefix).resolve() == (ROOT / "target" / "py-venv").resolve():
        return
    if not VENV_PYTHON.exists():
        benchlib.run(["cargo", "run", "-q", "-p", "kafka-harness", "--", "provision"], timeout=1800)
    subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "-q", "hdrhistogram"], check=True)
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(sys.argv[0]).resolve())] + sys.argv[1:])


class Processes:
    """Processes started here (each in its own session), stopped newest first at the end."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, **kw):
        p = subprocess.Popen(cmd, start_new_session=True, cwd=ROOT, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, timeout=30):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in reversed(list(self.procs)):
            self.stop(p, timeout=10)


def start_cluster(procs, name, props=()):
    """A 1-broker KRaft cluster (kafka-harness up, Kafka's broker JVM settings); its bootstrap."""
    cmd = [str(TARGET / "release/kafka-harness"), "up", "--name", name, "--version", benchlib.VERSION]
    for o in BROKER_JVM:
        cmd += ["--jvm-opt", o]
    for p in BROKER_PROPS + list(props):
        cmd += ["--prop", p]
    p = procs.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return p, benchlib.bootstrap_of(p)


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def topics_of(size, per_topic):
    n = max(1, size // per_topic)
    return [(f"scale.t{i:04d}", per_topic if size >= per_topic else size) for i in range(n)]


def create_topics(bootstrap, topics):
    from confluent_kafka.admin import NewTopic
    a = admin(bootstrap)
    for i in range(0, len(topics), 50):
        futures = a.create_topics([NewTopic(t, n, 1) for t, n in topics[i:i + 50]], request_timeout=120)
        for f in futures.values():
            f.result()


def fill(bootstrap, topics, per_partition):
    """`per_partition` small records into every partition."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "compression.type": "lz4"})
    for t, n in topics:
        for part in range(n):
            for i in range(per_partition):
                while True:
                    try:
                        p.produce(t, value=b"v" * 100, key=f"k{i}".encode(), partition=part)
                        break
                    except BufferError:
                        p.poll(0.1)
        p.poll(0)
    if p.flush(120):
        raise SystemExit("filling the source did not finish")


def end_offsets(bootstrap, topics, attempts=30):
    """{(topic, partition): high watermark} of every partition, or None if some partition did not
    answer after `attempts` tries (a partial map must never compare equal, nor stand as the
    source's ends: a chunk that timed out once made a 10,000-partition run wait forever)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec
    a = admin(bootstrap)
    out = {}
    missing = [TopicPartition(t, p) for t, n in topics for p in range(n)]
    for _ in range(attempts):
        failed, reason = [], None
        for i in range(0, len(missing), 2000):
            chunk = missing[i:i + 2000]
            try:
                result = a.list_offsets({tp: OffsetSpec.latest() for tp in chunk}, request_timeout=60)
            except Exception as e:
                reason = reason or e
                failed.extend(chunk)
                continue
            for tp, f in result.items():
                try:
                    out[(tp.topic, tp.partition)] = f.result().offset
                except Exception as e:
                    reason = reason or e
                    failed.append(TopicPartition(tp.topic, tp.partition))
        if not failed:
            return out
        if attempts > 1:
            log(f"  end offsets of {len(failed)} partitions at {bootstrap} not read ({reason}); again in 2 s")
            time.sleep(2)
        missing = failed
    return None


def metric(url, name, labels):
    """The value of metric `name` with all of `labels` in a Prometheus text page (0 if absent)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape_cost(url, scrapes=10):
    """What a Prometheus scrape of /metrics costs: page size, sample lines, and the time of each of
    `scrapes` scrapes in a row (ms, p50 and max), as a scraper sees it."""
    times, size, samples = [], 0, 0
    for _ in range(scrapes):
        t = time.monotonic()
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
        times.append(1000 * (time.monotonic() - t))
        size = len(body)
        samples = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    times.sort()
    return {"metrics_kib": size / 1024, "metrics_samples": samples, "metrics_ms_p50": times[len(times) // 2], "metrics_ms_max": times[-1]}


def cpu_s(pid):
    return benchlib.cpu_seconds(pid)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def start_proxy(procs, dest, run_dir):
    port, metrics = benchlib.free_port(), benchlib.free_port()
    env = dict(os.environ, RUST_LOG=os.environ.get("BENCH_PROXY_LOG", "warn"), KMP_PROXY__LISTEN=f"127.0.0.1:{port}", KMP_PROXY__BROKER_PORT_BASE="0",
               KMP_DESTINATION__BOOTSTRAP_SERVERS=dest, KMP_ADMIN__METRICS_LISTEN=f"127.0.0.1:{metrics}")
    out = open(run_dir / "proxy.log", "w")
    p = procs.start([str(TARGET / "release/kafka-mirror-proxy"), "--config", str(ROOT / "proxy.yaml")], env=env, stdout=out, stderr=out)
    benchlib.wait_healthy(f"http://127.0.0.1:{metrics}/health", deadline=120)
    return p, f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics"


def kafka_mirrors(proxy, *args):
    return benchlib.run([str(TARGET / "release/kafka-mirrors"), "--bootstrap-server", proxy, *args], timeout=600)


def start_mm2(procs, source, dest, run_dir, tasks):
    props = run_dir / "mm2.properties"
    props.write_text("\n".join([
        "clusters = A, B", f"A.bootstrap.servers = {source}", f"B.bootstrap.servers = {dest}",
        "A->B.enabled = true", "A->B.topics = scale\\..*", "B->A.enabled = false",
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        f"tasks.max = {tasks}", "replication.factor = 1", "heartbeats.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1", "status.storage.replication.factor = 1", "config.storage.replication.factor = 1",
        "emit.heartbeats.enabled = false", "emit.checkpoints.enabled = false", "sync.group.offsets.enabled = false",
        "sync.topic.acls.enabled = false", "emit.offset-syncs.enabled = false", "refresh.topics.interval.seconds = 10",
        "A.consumer.isolation.level = read_committed", "B.producer.linger.ms = 0", "B.producer.acks = all",
        "offset.flush.timeout.ms = 10000", ""]))
    log4j = run_dir / "log4j2.properties"
    log4j.write_text("status = warn\nappender.console.type = Console\nappender.console.name = console\n"
                     "appender.console.target = SYSTEM_OUT\nappender.console.layout.type = PatternLayout\n"
                     "appender.console.layout.pattern = [%d] %p %m (%c)%n\nrootLogger.level = WARN\n"
                     "rootLogger.appenderRef.console.ref = console\n")
    out = open(run_dir / "mm2.log", "w")
    return procs.start(["java", "-server", "-XX:+UseG1GC", "-Xms256m", "-Xmx2g", f"-Dlog4j2.configurationFile={log4j}",
                        "-cp", f"{MM2_LIBS}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(props)], stdout=out, stderr=out)


def probe(source, dest, topics, count, rng, timeout_s=120):
    """Lag of `count` single records, each written to a random partition once the previous one
    arrived: milliseconds from the source's acknowledgement until the destination's end offset (high
    watermark, read with ListOffsets every 2 ms) is past the record. Before each record, the
    partition's end offset is read once, so the reader's metadata for the topic is not in the figure."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from hdrh.histogram import HdrHistogram
    producer = Producer({"bootstrap.servers": source, "linger.ms": 0, "acks": "all"})
    reader = Consumer({"bootstrap.servers": dest, "group.id": "scale-probe", "enable.auto.commit": False})
    hist = HdrHistogram(1, 600_000_000, 3)
    lost = 0
    samples = []
    parts = [(t, p) for t, n in topics for p in range(n)]
    for _ in range(count):
        t, p = rng.choice(parts)
        tp = TopicPartition(t, p)
        reader.get_watermark_offsets(tp, timeout=30, cached=False)
        acked = {}

        def on_delivery(err, msg):
            acked["at"] = time.monotonic()
            acked["offset"] = None if err else msg.offset()

        producer.produce(t, value=b"probe", partition=p, on_delivery=on_delivery)
        producer.flush(30)
        if acked.get("offset") is None:
            raise SystemExit(f"probe to {t}-{p} not acknowledged")
        deadline = time.monotonic() + timeout_s
        got = None
        while time.monotonic() < deadline:
            try:
                _, high = reader.get_watermark_offsets(tp, timeout=5, cached=False)
            except Exception:
                high = -1
            if high > acked["offset"]:
                got = time.monotonic()
                break
            time.sleep(0.002)
        if got is None:
            lost += 1
            log(f"  probe {t}-{p}@{acked['offset']} not on the destination after {timeout_s} s")
            continue
        hist.record_value(max(1, int((got - acked["at"]) * 1e6)))
        samples.append(round((got - acked["at"]) * 1000, 1))
    reader.close()
    q = lambda pct: hist.get_value_at_percentile(pct) / 1000  # noqa: E731 (ms)
    return {"probes": count, "arrived": count - lost, "p50_ms": q(50), "p99_ms": q(99), "max_ms": hist.get_max_value() / 1000, "lags_ms": samples}


def wait_until(check, timeout_s, what, poll=0.5):
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        v = check()
        if v:
            return time.monotonic() - start
        time.sleep(poll)
    raise SystemExit(f"{what} not reached within {timeout_s} s")


def run_path(path, size, source, topics, args, procs, out_dir, rng):
    run_dir = out_dir / f"{path}-{size}"
    run_dir.mkdir(parents=True, exist_ok=True)
    dest_proc, dest = start_cluster(procs, f"scale-dst-{path}-{size}", ["transaction.partition.verification.enable=false"])
    src_ends = end_offsets(source, topics)
    if src_ends is None:
        raise SystemExit(f"the source's end offsets could not be read at {source}")
    result = {"path": path, "partitions": size, "topics": len(topics)}
    copied = lambda: end_offsets(dest, topics, attempts=1) == src_ends  # noqa: E731
    if path == "proxy":
        copier, bootstrap, metrics = start_proxy(procs, dest, run_dir)
        (run_dir / "mirror.properties").write_text(f"bootstrap.servers={source}\n")
        kafka_mirrors(bootstrap, "--create", "--mirror", MIRROR, "--mirror-config", str(run_dir / "mirror.properties"))
        t0 = time.monotonic()
        kafka_mirrors(bootstrap, "--add", "--mirror", MIRROR, "--topic", "scale\\..*")
        mirroring = lambda: metric(metrics, "kafka_mirror_proxy_mirror_partitions", {"mirror": MIRROR, "state": "MIRRORING"}) == size  # noqa: E731
        wait_until(mirroring, args.timeout, "every partition MIRRORING")
        result["all_mirroring_s"] = time.monotonic() - t0
        wait_until(copied, args.timeout, "destination end offsets equal to the source's", poll=2)
        result["all_copied_s"] = time.monotonic() - t0
    else:
        if args.mm2_precreate:
            # MirrorMaker 2 creates every missing topic with one CreateTopics; a KRaft controller refuses
            # one of more than 10,000 records ("excessively large batch operation"), so at 10,000
            # partitions it never copies. Created here beforehand (50 topics per request, as for the
            # source), outside MirrorMaker 2's time.
            create_topics(dest, topics)
        t0 = time.monotonic()
        copier = start_mm2(procs, source, dest, run_dir, min(size, args.mm2_tasks))
        wait_until(copied, args.timeout, "destination end offsets equal to the source's", poll=2)
        result["all_copied_s"] = time.monotonic() - t0
        result["all_mirroring_s"] = None
    log(f"  {path} at {size}: every partition MIRRORING after {result['all_mirroring_s']}, copied after {result['all_copied_s']:.1f} s")
    time.sleep(args.settle)
    cpu0, t_idle = cpu_s(copier.pid), time.monotonic()
    time.sleep(args.idle_seconds)
    result["idle_cpu_pct"] = 100 * (cpu_s(copier.pid) - cpu0) / (time.monotonic() - t_idle)
    result["rss_mib"] = rss_mib(copier.pid)
    if path == "proxy":
        result.update(scrape_cost(metrics))
        log(f"  {path} at {size}: /metrics {result['metrics_kib']:.0f} KiB, {result['metrics_samples']} samples, "
            f"scrape p50 {result['metrics_ms_p50']:.0f} ms max {result['metrics_ms_max']:.0f} ms")
    result.update(probe(source, dest, topics, args.probes, rng))
    final = end_offsets(dest, topics)
    src_final = end_offsets(source, topics)
    result["end_offsets_equal"] = final is not None and final == src_final
    log(f"  {path} at {size}: idle CPU {result['idle_cpu_pct']:.2f}% of a core, RSS {result['rss_mib']:.0f} MiB, "
        f"probe lag p50 {result['p50_ms']:.0f} ms p99 {result['p99_ms']:.0f} ms ({result['arrived']}/{result['probes']} arrived), "
        f"end offsets equal: {result['end_offsets_equal']}")
    procs.stop(copier)
    procs.stop(dest_proc)
    return result


def table(results):
    rows = ["| path | partitions (topics) | all MIRRORING (s) | all copied (s) | idle-partition lag p50 / p99 / max (ms) | probes arrived | idle CPU (% of a core) | RSS (MiB) | /metrics KiB, samples, scrape ms p50 / max | end offsets equal |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = "-" if r["all_mirroring_s"] is None else f"{r['all_mirroring_s']:.1f}"
        page = (f"{r['metrics_kib']:,.0f}, {r['metrics_samples']:,}, {r['metrics_ms_p50']:.0f} / {r['metrics_ms_max']:.0f}"
                if "metrics_kib" in r else "-")
        rows.append(f"| {r['path']} | {r['partitions']:,} ({r['topics']}) | {m} | {r['all_copied_s']:.1f} | "
                    f"{r['p50_ms']:.0f} / {r['p99_ms']:.0f} / {r['max_ms']:.0f} | {r['arrived']}/{r['probes']} | "
                    f"{r['idle_cpu_pct']:.2f} | {r['rss_mib']:.0f} | {page} | {r['end_offsets_equal']} |")
    return "\n".join(rows)


def log_read_ahead():
    """Logs the read-ahead of the disk under the brokers' data (the temporary directory): above a few
    hundred KiB every first touch of a Kafka index page zero-fills the whole window, which cost the
    brokers half their CPU at 1,000 partitions on a VM with 8 MiB (BENCHMARKS.md, 2026-12-07).
    `echo 128 > /sys/block/DEV/queue/read_ahead_kb` sets Linux's default."""
    import subprocess
    import tempfile
    try:
        source = subprocess.run(["df", "--output=source", tempfile.gettempdir()], capture_output=True, text=True).stdout.split()[-1]
        parent = subprocess.run(["lsblk", "-no", "PKNAME", source], capture_output=True, text=True).stdout.strip()
        dev = parent or os.path.basename(source)
        kb = int(Path(f"/sys/block/{dev}/queue/read_ahead_kb").read_text())
    except (OSError, ValueError, IndexError):
        return
    log(f"read-ahead of {dev} (the brokers' disk): {kb} KiB" + (" -- WARNING: above 512 KiB, index page faults are expensive" if kb > 512 else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--paths", default="proxy,mm2")
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--records-per-partition", type=int, default=10)
    parser.add_argument("--probes", type=int, default=60)
    parser.add_argument("--idle-seconds", type=int, default=60)
    parser.add_argument("--settle", type=int, default=10, help="seconds after copying before idle CPU is measured")
    parser.add_argument("--mm2-tasks", type=int, default=12)
    parser.add_argument("--mm2-precreate", type=int, default=1,
                        help="1: create the destination topics before MirrorMaker 2 starts (it cannot at 10,000 partitions)")
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args()
    in_venv()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 1_048_576)), hard))
    log("building release binaries")
    benchlib.run(["cargo", "build", "-q", "--release", "-p", "kafka-harness", "-p", "kafka-mirror-proxy",
                  "--bin", "kafka-harness", "--bin", "kafka-mirror-proxy", "--bin", "kafka-mirrors"], timeout=3600)
    if "mm2" in args.paths and not (MM2_LIBS / f"connect-mirror-{MM2_VERSION}.jar").exists():
        benchlib.run(["mvn", "-q", "-f", str(HERE / "mm2/pom.xml"), "dependency:copy-dependencies", f"-Dkafka.version={MM2_VERSION}",
                      f"-DoutputDirectory={MM2_LIBS}"], timeout=1800)
    out_dir = Path(os.environ.get("BENCH_OUT", ROOT / "target" / "bench-scale" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = benchlib.run(["git", "rev-parse", "HEAD"]).strip()
    log(f"commit {commit}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; results in {out_dir}")
    log_read_ahead()
    # SIGTERM (timeout, kill) ends the run through the `finally` below, which stops every cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    results = []
    procs = Processes()
    try:
        for size in map(int, args.sizes.split(",")):
            src_proc, source = start_cluster(procs, f"scale-src-{size}")
            topics = topics_of(size, args.partitions_per_topic)
            t = time.monotonic()
            create_topics(source, topics)
            fill(source, topics, args.records_per_partition)
            log(f"source with {size} partitions in {len(topics)} topics ready in {time.monotonic() - t:.0f} s")
            for path in args.paths.split(","):
                results.append(run_path(path, size, source, topics, args, procs, out_dir, rng))
                (out_dir / "scale.json").write_text(json.dumps({"commit": commit, "results": results}, indent=2))
            procs.stop(src_proc)
    finally:
        procs.stop_all()
    report = f"Commit {commit}; `{' '.join(sys.argv)}`\n\n" + table(results)
    (out_dir / "scale.md").write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
