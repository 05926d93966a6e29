"""What benches/proxy/bench.py, ab.py, relay_bench.py and request_cost.py share: where things are (the
repository, cargo's target directory, the Kafka jars the test harness provisions) and small process
and socket helpers."""

import functools
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = os.environ.get("KAFKA_VERSION", "4.4.0")
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
LIBS = ROOT / "target" / "kafka" / VERSION / "libs"


def logger(prefix):
    """A function printing `prefix: message` lines on stderr."""
    def log(msg):
        print(f"{prefix}: {msg}", file=sys.stderr, flush=True)
    return log


def free_port():
    """A free loopback port below the kernel's ephemeral range, checked by binding it: no outgoing
    connection of another process can take it before a broker or proxy binds it, as one from bind(0)
    could (a benchmark's destination broker once failed to start so)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
        low = int(f.read().split()[0])
    for _ in range(1000):
        port = random.randrange(10000, low) if low > 11000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free loopback port below the ephemeral range")


def run(cmd, timeout=900):
    """Runs `cmd` in the repository; its stdout, or exits with its output on failure."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def cpu_seconds(pid):
    """User + system CPU seconds the process `pid` has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def system_congestion_control():
    """The TCP congestion control algorithm new sockets get on this machine (the broker's and the
    clients' in both paths), for the report."""
    try:
        return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return "unknown"


def pin_prefixes(proxy_cpu):
    """For --pin-proxy-cpu: the command prefixes (`taskset -c ...`) that put the broker and clients
    on every CPU but `proxy_cpu`, and the proxy on `proxy_cpu` alone; empty prefixes for None."""
    if proxy_cpu is None:
        return [], []
    allowed = os.sched_getaffinity(0)
    others = sorted(allowed - {proxy_cpu})
    if not others or proxy_cpu not in allowed:
        raise SystemExit(f"--pin-proxy-cpu {proxy_cpu}: needs that CPU and at least one other")
    return ["taskset", "-c", ",".join(map(str, others))], ["taskset", "-c", str(proxy_cpu)]


def stop_all(processes, timeout=60):
    """SIGTERM to each process, newest first; SIGKILL to any still running after `timeout` seconds."""
    for p in reversed(processes):
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()


# Broker properties of every benchmark cluster. The scripts delete each topic once measured
# (delete_topic); with Kafka's default delay of 60 s, the broker would unlink its gigabytes of files
# in the middle of a later run, often the other path's.
BENCH_BROKER_PROPS = ("log.segment.delete.delay.ms=0",)


def harness_up(name, prefix=(), props=()):
    """Starts a 1-broker cluster with `kafka-harness up` (release build), run under `prefix` (e.g.
    taskset) with BENCH_BROKER_PROPS and extra broker properties `props` (KEY=VALUE); it runs until
    stopped. Its bootstrap comes from bootstrap_of."""
    cmd = list(prefix) + [str(TARGET / "release/kafka-harness"), "up", "--name", name, "--version", VERSION]
    for p in BENCH_BROKER_PROPS + tuple(props):
        cmd += ["--prop", p]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)


def bootstrap_of(cluster):
    """The bootstrap address a harness_up process prints once its cluster runs."""
    line = next((l for l in cluster.stdout if l.startswith("bootstrap=")), None)
    if not line:
        raise SystemExit("the harness did not start a cluster")
    return line.strip().split("=", 1)[1]


def start_proxy(binary, bootstrap, prefix=(), tcp_congestion=None):
    """Starts the proxy `binary` in front of `bootstrap` (mirroring off, one listener port per broker
    picked by the system, proxy.tcp_congestion_control = `tcp_congestion` if given, proxy.yaml for
    the rest) under `prefix`, and waits until it is healthy. Returns (process, its bootstrap address,
    its metrics port)."""
    port, metrics = free_port(), free_port()
    env = dict(os.environ, RUST_LOG="warn", KMP_PROXY__LISTEN=f"127.0.0.1:{port}", KMP_PROXY__BROKER_PORT_BASE="0",
               KMP_MIRRORS__ENABLED="false", KMP_DESTINATION__BOOTSTRAP_SERVERS=bootstrap,
               KMP_ADMIN__METRICS_LISTEN=f"127.0.0.1:{metrics}")
    if tcp_congestion:
        env["KMP_PROXY__TCP_CONGESTION_CONTROL"] = tcp_congestion
    proc = subprocess.Popen(list(prefix) + [str(binary), "--config", str(ROOT / "proxy.yaml")], env=env, cwd=ROOT)
    wait_healthy(f"http://127.0.0.1:{metrics}/health")
    return proc, f"127.0.0.1:{port}", metrics


def wait_healthy(url, deadline=60, poll=0.2):
    """Polls the proxy's /health until it answers 200, or exits after `deadline` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(poll)
    raise SystemExit(f"the proxy did not become healthy at {url}")


DURATION = re.compile(r'^kafka_mirror_proxy_request_duration_seconds_bucket\{api="([^"]+)",le="([^"]+)"\} (\d+)$')


def request_durations(metrics_url):
    """The proxy's request-duration histogram buckets: {(api, le): cumulative count}."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    return {(m[1], m[2]): int(m[3]) for m in map(DURATION.match, text.splitlines()) if m}


def duration_quantile(before, after, api, q):
    """From two scrapes of request_durations: the upper bound, in ms, of the bucket holding the q
    quantile of the `api` requests timed in between (None if there were none)."""
    delta = [(le, after.get((a, le), 0) - before.get((a, le), 0)) for (a, le) in after if a == api]
    total = dict(delta).get("+Inf", 0)
    if not total:
        return None
    for le, n in sorted(delta, key=lambda x: float(x[0])):
        if n >= q * total:
            return float(le) * 1000
    return None


# The java command of the benchmark clients (Kafka's perf tools, TopicCommand, ProxyLatency.java).
JAVA = ["java", "-Xmx1g", "-XX:+UseG1GC", "-cp", f"{LIBS}/*"]


def create_topic(java_cmd, bootstrap, topic, partitions):
    """Creates `topic` (replication factor 1) with TopicCommand, run as `java_cmd` (JAVA under any
    taskset prefix)."""
    run(java_cmd + ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                    "--partitions", str(partitions), "--replication-factor", "1"])


def delete_topic(java_cmd, bootstrap, topic):
    """Deletes a topic once measured: at half of a fast machine's end-to-end maximum, one round of
    latency runs writes some 15 GB, and a 5-round bench.py run that kept its topics filled the disk
    (74 GB). The broker unlinks the files at once (BENCH_BROKER_PROPS), before the next run starts."""
    run(java_cmd + ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--delete", "--topic", topic])


# The end-to-end latency tools: the same measurement, flags and JSON line (see each one's header).
# "java" is ProxyLatency.java on the Kafka jars; "go" is latency-go (franz-go), which takes less CPU
# from the broker and the proxy on a small machine and has no multi-millisecond GC pauses of its own.
LATENCY_TOOLS = ("java", "go")


@functools.cache
def _go_tool():
    """Builds benches/proxy/latency-go into target/bench (once per run of a script); its path."""
    path = TARGET / "bench" / "proxy-latency"
    path.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["go", "build", "-o", str(path), "."], cwd=ROOT / "benches/proxy/latency-go", capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"building benches/proxy/latency-go failed:\n{p.stderr[-3000:]}")
    return path


def latency_command(tool, prefix):
    """The command that runs latency tool `tool` under `prefix` (e.g. taskset), before its flags:
    ProxyLatency.java with the Kafka jars, or the Go tool."""
    if tool == "java":
        return list(prefix) + JAVA + [str(ROOT / "benches/proxy/ProxyLatency.java")]
    if tool == "go":
        return list(prefix) + [str(_go_tool())]
    raise SystemExit(f"unknown latency tool {tool!r}; one of {', '.join(LATENCY_TOOLS)}")
