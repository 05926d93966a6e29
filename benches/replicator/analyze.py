#!/usr/bin/env python3
"""Turns the raw samples of one benchmark run (benches/replicator/run.sh) into figures.

Inputs in RUN_DIR (all times are epoch milliseconds):
  probe.txt   OffsetProbe lines: "<t> S|D <topic>:<end,end,...> ..."
  cpu.txt     "<t> <name>=<ticks> ... machine_busy=<ticks> machine_total=<ticks>" (ticks: 1/100 s,
              utime+stime+cutime+cstime of each process, busy/total of /proc/stat)
  events.txt  "<name> <t>" lines (copier_start, lag_start:<topic>, lag_end:<topic>, ...)

usage:
  analyze.py bulk RUN_DIR TOPIC RECORDS RECORD_SIZE COPIER   -> JSON on stdout
  analyze.py lag RUN_DIR TOPIC START_MS END_MS COPIER        -> JSON on stdout
  analyze.py progress RUN_DIR TOPIC                          -> destination record count (last sample)
  analyze.py caught_up RUN_DIR TOPIC                         -> 1 if the destination has every source record
"""
import json
import sys

TICKS = 100.0


def read_probe(run_dir, topic):
    """[(t, side, [ends] or None)] for `topic`, in file order."""
    out = []
    with open(f"{run_dir}/probe.txt", encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            t, side = int(parts[0]), parts[1]
            ends = None
            for p in parts[2:]:
                name, _, values = p.rpartition(":")
                if name == topic:
                    if values != "-":
                        ends = [int(v) for v in values.split(",")]
            out.append((t, side, ends))
    return out


def read_cpu(run_dir):
    rows = []
    with open(f"{run_dir}/cpu.txt", encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            row = {"t": int(parts[0])}
            for p in parts[1:]:
                k, _, v = p.partition("=")
                if v:
                    row[k] = int(v)
            rows.append(row)
    return rows


def cpu_at(rows, t, key):
    """Ticks of `key` at time t: the last sample at or before t (a process that exited keeps its
    last value)."""
    best = None
    for r in rows:
        if r["t"] > t and best is not None:
            break
        if key in r:
            best = r[key]
    return best or 0


def cpu_between(rows, t0, t1, key):
    return (cpu_at(rows, t1, key) - cpu_at(rows, t0, key)) / TICKS


def pct(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(q / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[i]


def dest_totals(samples):
    return [(t, sum(max(0, e) for e in ends)) for t, side, ends in samples if side == "D" and ends]


def bulk(run_dir, topic, records, record_size, copier):
    samples = read_probe(run_dir, topic)
    totals = dest_totals(samples)
    events = read_events(run_dir)
    start = events["copier_start"]

    def reached(fraction):
        for t, n in totals:
            if n >= fraction * records:
                return t
        return None

    t_first = next((t for t, n in totals if n > 0), None)
    t5, t95, t_done = reached(0.05), reached(0.95), reached(1.0)
    result = {"records": records, "bytes": records * record_size, "start_ms": start,
              "first_record_ms": t_first, "t5_ms": t5, "t95_ms": t95, "done_ms": t_done}
    if None in (t5, t95, t_done):
        result["incomplete"] = True
        return result
    if t95 <= t5:
        # Too few samples for a 5%-95% window (tiny runs): fall back to first record .. done.
        t5, t95 = t_first, max(t_done, t_first + 1)
        result["window"] = "first record to done"
    steady_bytes = 0.9 * records * record_size
    result["steady_mb_s"] = steady_bytes / 1e6 / ((t95 - t5) / 1000.0)
    result["steady_records_s"] = 0.9 * records / ((t95 - t5) / 1000.0)
    result["wall_s"] = (t_done - start) / 1000.0
    result["wall_mb_s"] = records * record_size / 1e6 / result["wall_s"]
    cpu = read_cpu(run_dir)
    gb_steady = steady_bytes / 1e9
    gb_all = records * record_size / 1e9
    keys = sorted({k for r in cpu for k in r if k not in ("t",)})
    result["cpu_s_per_gb_steady"] = {k: cpu_between(cpu, t5, t95, k) / gb_steady for k in keys}
    result["cpu_s_per_gb_whole"] = {k: cpu_between(cpu, start, t_done, k) / gb_all for k in keys}
    result["cpu_s_whole"] = {k: cpu_between(cpu, start, t_done, k) for k in keys}
    # Cores busy on average during the steady window, ours and the whole machine's.
    window = (t95 - t5) / 1000.0
    result["cores_busy_steady"] = {k: cpu_between(cpu, t5, t95, k) / window for k in keys}
    result["copier"] = copier
    return result


def read_events(run_dir):
    events = {}
    with open(f"{run_dir}/events.txt", encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                events[parts[0]] = int(parts[1])
    return events


def lag(run_dir, topic, start_ms, end_ms, copier):
    """Two lag measures over samples taken in [start_ms, end_ms]:
    - offset lag: sum over partitions of (source end offset - destination end offset), the
      destination sampled right after the source;
    - catch-up delay: for each source sample at time t, the time until a destination sample shows
      every partition at or past those end offsets (an upper bound on the replication delay of the
      newest record at t, at probe granularity)."""
    samples = read_probe(run_dir, topic)
    pairs = []
    for i in range(len(samples) - 1):
        (ts, s1, se), (td, s2, de) = samples[i], samples[i + 1]
        if s1 == "S" and s2 == "D" and se and de and len(se) == len(de):
            pairs.append((ts, se, td, de))
    offset_lags = []
    delays = []
    never = 0
    dest = [(td, de) for _, _, td, de in pairs]
    j0 = 0
    produced0 = produced1 = None
    for ts, se, td, de in pairs:
        if not (start_ms <= ts <= end_ms):
            continue
        if produced0 is None:
            produced0 = (ts, sum(se))
        produced1 = (ts, sum(se))
        offset_lags.append(sum(max(0, s - d) for s, d in zip(se, de)))
        # Source and destination ends only grow, so the first destination sample covering a source
        # sample never moves back: one forward pass.
        while j0 < len(dest) and (dest[j0][0] < ts or not all(d >= s for s, d in zip(se, dest[j0][1]))):
            j0 += 1
        if j0 == len(dest):
            # Never caught up while the probe ran: the delay is at least until its last sample.
            never += 1
            delays.append((dest[-1][0] - ts if dest else 0, True))
        else:
            delays.append((dest[j0][0] - ts, False))
    offset_lags.sort()
    delays.sort(key=lambda d: (d[1], d[0]))  # censored values (lower bounds) rank above all others

    def delay_pct(q):
        d = pct(delays, q)
        if d is None:
            return None
        return f">{d[0]}" if d[1] else d[0]
    rate = None
    if produced0 and produced1 and produced1[0] > produced0[0]:
        rate = (produced1[1] - produced0[1]) / ((produced1[0] - produced0[0]) / 1000.0)
    cpu = read_cpu(run_dir)
    keys = sorted({k for r in cpu for k in r if k != "t"})
    window = (end_ms - start_ms) / 1000.0
    return {
        "topic": topic, "copier": copier, "window_s": window, "samples": len(offset_lags),
        "source_records_s": rate,
        "offset_lag_p50": pct(offset_lags, 50), "offset_lag_p99": pct(offset_lags, 99),
        "offset_lag_max": offset_lags[-1] if offset_lags else None,
        # A string ">N" is a lower bound: that share of samples never caught up while the probe ran.
        "delay_ms_p50": delay_pct(50), "delay_ms_p99": delay_pct(99),
        "delay_ms_max": delay_pct(100),
        "samples_never_caught_up": never,
        "cores_busy": {k: cpu_between(cpu, start_ms, end_ms, k) / window for k in keys},
    }


def main():
    cmd = sys.argv[1]
    if cmd == "bulk":
        run_dir, topic, records, size, copier = sys.argv[2:7]
        print(json.dumps(bulk(run_dir, topic, int(records), int(size), copier), indent=1))
    elif cmd == "lag":
        run_dir, topic, start, end, copier = sys.argv[2:7]
        print(json.dumps(lag(run_dir, topic, int(start), int(end), copier), indent=1))
    elif cmd == "progress":
        run_dir, topic = sys.argv[2:4]
        totals = dest_totals(read_probe_tail(run_dir, topic))
        print(totals[-1][1] if totals else 0)
    elif cmd == "caught_up":
        run_dir, topic = sys.argv[2:4]
        samples = read_probe_tail(run_dir, topic)
        last_s = next((e for t, s, e in reversed(samples) if s == "S" and e), None)
        last_d = next((e for t, s, e in reversed(samples) if s == "D" and e), None)
        ok = last_s is not None and last_d is not None and len(last_s) == len(last_d) and all(
            d >= s for s, d in zip(last_s, last_d))
        print(1 if ok else 0)
    else:
        sys.exit(__doc__)


def read_probe_tail(run_dir, topic):
    """The last few probe samples for `topic` (reads only the end of the file)."""
    path = f"{run_dir}/probe.txt"
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 16384))
            lines = f.read().decode("ascii", "replace").splitlines()[1:]
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        ends = None
        for p in parts[2:]:
            name, _, values = p.rpartition(":")
            if name == topic and values != "-":
                try:
                    ends = [int(v) for v in values.split(",")]
                except ValueError:
                    ends = None
        out.append((int(parts[0]), parts[1], ends))
    return out


if __name__ == "__main__":
    main()
