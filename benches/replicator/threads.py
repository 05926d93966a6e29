#!/usr/bin/env python3
"""Where a process's CPU goes, by thread: snapshots of /proc/PID/task/*/stat and their difference.

    threads.py snap PID OUT.json          user and system ticks of every thread, by thread id and name
    threads.py diff BEFORE.json AFTER.json SECONDS
                                          CPU per thread group between the snapshots: threads named
                                          alike (digits stripped: "data-plane-kafka-request-handler-3"
                                          joins "...-handler-#") are summed; cores busy, user / system
    threads.py jfr RECORDING.jfr          the Java methods most often on CPU in a JFR recording
                                          (execution samples: top frame, and anywhere on the stack)

Used by run.sh (BENCH_PROFILE=1) on both brokers during a bulk copy: it tells request handler
threads (validation, log append) from network threads (reading requests, sending responses) and
from the kernel's share (system time: socket copies, page cache writes).
"""
import json
import os
import re
import sys

TICKS = os.sysconf("SC_CLK_TCK")


def java_names(pid):
    """Full names of a JVM's threads by thread id (/proc's comm keeps only 15 characters, which
    merges Kafka's network threads with its request handlers); empty if jcmd cannot attach."""
    import subprocess
    try:
        dump = subprocess.run(["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {str(int(m.group(2), 16)): m.group(1) for m in re.finditer(r'^"([^"]*)".*? nid=0x([0-9a-f]+)', dump, re.M)}


def snap(pid, out):
    names = java_names(pid)
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended between listing and reading
        name = names.get(tid) or stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        threads[tid] = {"name": name, "user": int(fields[11]), "system": int(fields[12])}
    with open(out, "w") as f:
        json.dump(threads, f)


def group_of(name):
    return re.sub(r"\d+", "#", re.sub(r"ListenerName\(.*?\)-", "", name))


def diff(before_path, after_path, seconds):
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    groups = {}
    for tid, t in after.items():
        b = before.get(tid, {"user": 0, "system": 0})
        g = groups.setdefault(group_of(t["name"]), {"threads": 0, "user": 0, "system": 0})
        g["threads"] += 1
        g["user"] += t["user"] - b["user"]
        g["system"] += t["system"] - b["system"]
    total_user = sum(g["user"] for g in groups.values())
    total_system = sum(g["system"] for g in groups.values())
    rows = sorted(groups.items(), key=lambda kv: -(kv[1]["user"] + kv[1]["system"]))
    cores = lambda ticks: ticks / TICKS / seconds  # noqa: E731
    print(f"| thread group | threads | cores busy | user | system |")
    print(f"|---|---|---|---|---|")
    for name, g in rows:
        busy = g["user"] + g["system"]
        if busy == 0:
            continue
        print(f"| {name} | {g['threads']} | {cores(busy):.3f} | {cores(g['user']):.3f} | {cores(g['system']):.3f} |")
    print(f"| all | {sum(g['threads'] for g in groups.values())} | {cores(total_user + total_system):.3f} "
          f"| {cores(total_user):.3f} | {cores(total_system):.3f} |")


def jfr(path, top=25):
    import collections
    import subprocess
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "24", "--events", "jdk.ExecutionSample", path],
                         check=True, capture_output=True, text=True).stdout
    events = json.loads(out)["recording"]["events"]
    self_counts, anywhere = collections.Counter(), collections.Counter()
    for e in events:
        frames = e["values"]["stackTrace"]["frames"] if e["values"].get("stackTrace") else []
        names = []
        for fr in frames:
            m = fr["method"]
            names.append(f"{m['type']['name']}.{m['name']}")
        if not names:
            continue
        self_counts[names[0]] += 1
        for n in set(names):
            anywhere[n] += 1
    n = len(events)
    print(f"{n} execution samples")
    for title, counts in (("on top of the stack", self_counts), ("anywhere on the stack", anywhere)):
        print(f"\n| {title} | share |\n|---|---|")
        for name, c in counts.most_common(top):
            print(f"| {name} | {100 * c / max(n, 1):.1f}% |")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "snap":
        snap(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif len(sys.argv) == 3 and sys.argv[1] == "jfr":
        jfr(sys.argv[2])
    else:
        sys.exit(__doc__)
