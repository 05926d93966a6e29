"""What benches/proxy/bench.py, ab.py and request_cost.py share: where things are (the
repository, cargo's target directory, the Kafka jars the test harness provisions) and small process
and socket helpers."""

import os
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
