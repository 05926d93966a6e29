#!/usr/bin/env bash
# Replicator benchmark (issue 4): mirrors BENCH_BYTES of 1 KiB lz4 records (12 partitions) from a
# source to a fresh destination cluster on loopback with
#   (a) our replicator (release build of the `replicate` example),
#   (b) MirrorMaker 2 (dedicated mode, IdentityReplicationPolicy, from Maven Central),
#   (c) the raw limit: ConsumerPerformance reading the source while ProducerPerformance writes the
#       same number of records (same size, payloads, batch.size, linger, lz4) into a fresh destination,
# then measures steady-state lag while a producer writes at half of the replicator's measured rate
# (and at half of MirrorMaker 2's rate). Results: $BENCH_OUT/summary.md and summary.json.
#
# usage: benches/replicator/run.sh          (from anywhere; 2 GB, about 20-40 minutes)
#        BENCH_BYTES=200000000 benches/replicator/run.sh    (quick run)
#
# Environment (defaults in brackets):
#   BENCH_BYTES [2000000000]   payload bytes to mirror (records = BENCH_BYTES / RECORD_SIZE)
#   RECORD_SIZE [1024]         bytes per record (payload lines of benches/replicator/payloads.py)
#   PARTITIONS [12]            partitions of the mirrored topic
#   BATCH_SIZE [131072]        producer batch.size of every producer (source fill, MM2, raw)
#   LINGER_MS [10]             producer linger.ms of every producer
#   LAG_SECONDS [60]           measured length of each lag phase, after LAG_WARMUP_SECONDS [30] of
#                              the same production that are not counted (JIT warm-up of the JVMs)
#   BENCH_REPEAT [3]           rounds of the three bulk copies (alternating: other load varies)
#   BENCH_KINDS ["replicator proxy mm2 raw"]   the bulk copies of each round
#   MM2_TASKS [min(PARTITIONS, 12)]  MirrorMaker 2's tasks.max (one consumer and producer each; more
#                              than the cores can run only adds overhead on this machine)
#   BENCH_LAG [1]              0: skip the lag phases (they need both the replicator and mm2)
#   BENCH_WARMUP_RECORDS [500000]  records written to every fresh destination (topic `warmup`) and read
#                              from the source once before anything is measured, so that most of the
#                              brokers' JIT compilation is done before (not all: the copiers' requests
#                              take other paths; BENCHMARKS.md) (0: the method before 2026-12-07)
#   BENCH_WARMUP_COPY [0]      1: also, before each bulk copy, a copier of the same kind copies a topic
#                              `warmup` (BENCH_WARMUP_RECORDS records, 12 partitions) into the fresh
#                              destination and is stopped; the measured copier is a new process
#   BENCH_REV [HEAD]           commit of this repository whose replicator is built (git archive, so
#                              uncommitted edits in the working tree are not measured)
#   REPLICATE_BIN              use this replicate binary instead of building one
#   CARGO_TARGET_DIR [/tmp/target-bench], CARGO_BUILD_JOBS [2]
#   KAFKA_VERSION [4.4.0]      brokers and perf tools (jars from target/kafka/<v>/libs, provisioned by
#                              `cargo run -p kafka-harness -- provision` if missing)
#   MM2_VERSION [4.3.1]        MirrorMaker 2 jars (connect-mirror 4.4.0 is not on Maven Central)
#   BENCH_DIR [/tmp/kmp-bench-<pid>]   Kafka data (deleted on exit)
#   BENCH_OUT [target/bench-replicator/<date>]   results (kept)
#   BENCH_TIMEOUT [7200]       hard bound on the whole script, seconds
#   BROKER_JVM_OPTS            default: Kafka's own (kafka-run-class.sh: 1 GiB heap, G1)
#   BENCH_PERF [0]             1: `perf record -g` the replicator and the proxy during their first bulk copy
#                              (RUN_DIR/perf-report.txt)
#   PROBE_MS [50; 500 above 100 partitions]  interval of the end-offset probe (ListOffsets of every
#                              partition on both clusters): at 1,000 partitions every 50 ms it is
#                              a load on the brokers of its own, shared by every copier
#   BENCH_READ_AHEAD_KB        set the read-ahead of the disk under BENCH_DIR to this (root; it
#                              stays set after the run); the run logs it either way, see below
#   BENCH_PROFILE [0]          1: per-thread CPU of both brokers during each copier's first bulk copy
#                              (RUN_DIR/broker-profile.md); jfr: and a JFR recording of each (starting
#                              JFR costs the brokers CPU itself: bytecode instrumentation, recompiles)
#
# Clusters are started here rather than with `kafka-harness up`: the harness's broker JVM options
# (C1 only, serial GC, 512 MiB heap) are tuned for test start-up, not throughput. Same jars and
# StorageTool format, Kafka's own JVM defaults, one combined broker+controller per cluster. Every
# destination has transaction.partition.verification.enable=false (the replicator needs it; MM2 and
# the raw producer are not transactional, so it does not affect them).
#
# Every process the script starts is in its own process group, recorded, and killed on exit
# (normal end, error, Ctrl-C, timeout).

set -euo pipefail
# The whole script is one compound command, parsed before it runs: editing this file while a run is
# under way cannot change that run.
{

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/benches/replicator"
BENCH_BYTES=${BENCH_BYTES:-2000000000}
RECORD_SIZE=${RECORD_SIZE:-1024}
PARTITIONS=${PARTITIONS:-12}
BATCH_SIZE=${BATCH_SIZE:-131072}
LINGER_MS=${LINGER_MS:-10}
LAG_SECONDS=${LAG_SECONDS:-60}
LAG_WARMUP_SECONDS=${LAG_WARMUP_SECONDS:-30}
BENCH_REPEAT=${BENCH_REPEAT:-3}
BENCH_KINDS=${BENCH_KINDS:-"replicator proxy mm2 raw"}
MM2_TASKS=${MM2_TASKS:-$((PARTITIONS < 12 ? PARTITIONS : 12))}
BENCH_LAG=${BENCH_LAG:-1}
BENCH_WARMUP_RECORDS=${BENCH_WARMUP_RECORDS:-500000}
BENCH_WARMUP_COPY=${BENCH_WARMUP_COPY:-0}
BENCH_PROFILE=${BENCH_PROFILE:-0}
export PROBE_MS=${PROBE_MS:-$((PARTITIONS > 100 ? 500 : 50))}
BENCH_REV=${BENCH_REV:-HEAD}
KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
MM2_VERSION=${MM2_VERSION:-4.3.1}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-7200}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/target-bench}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
BENCH_DIR=${BENCH_DIR:-/tmp/kmp-bench-$$}
BENCH_OUT=${BENCH_OUT:-$ROOT/target/bench-replicator/$STAMP}
LIBS="$ROOT/target/kafka/$KAFKA_VERSION/libs"
MM2_LIBS="$ROOT/target/kafka/mm2-$MM2_VERSION/libs"
RECORDS=$((BENCH_BYTES / RECORD_SIZE))
BROKER_JVM_OPTS=${BROKER_JVM_OPTS:-"-Xms1g -Xmx1g -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"}
# kafka-run-class.sh performance options, for the clients (perf tools, MM2, probe).
CLIENT_JVM_OPTS="-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
# Client settings shared by every producer: the source fill, MM2's producer, the raw-limit producer.
PRODUCER_PROPS="compression.type=lz4 batch.size=$BATCH_SIZE linger.ms=$LINGER_MS acks=all"
# Consumer settings of MM2 and of the raw-limit consumer: fetch sizes (8 MiB per partition matches the
# replicator's partition_fetch_bytes), read_committed as the replicator's default (and as the MM2
# docs recommend).
CONSUMER_PROPS="fetch.max.bytes=52428800 max.partition.fetch.bytes=8388608 isolation.level=read_committed"

PIDS=()          # process groups to kill on exit
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill -TERM -- "-${PIDS[i]}" 2>/dev/null || true
    done
    sleep 2
    for pid in "${PIDS[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$BENCH_DIR"
    [[ -d $BENCH_OUT ]] && log "results in $BENCH_OUT"
    exit "$status"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# Starts "$@" in the background in its own process group (setsid), records it, sets SPAWNED.
spawn() {
    setsid "$@" &
    SPAWNED=$!
    PIDS+=("$SPAWNED")
}

# Ends a process group started by spawn (TERM, then KILL after 20 s) and waits for it.
stop() {
    local pid=$1 signal=${2:-TERM}
    kill "-$signal" -- "-$pid" 2>/dev/null || true
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

java_tool() { java $CLIENT_JVM_OPTS -Xmx512m -Dlog4j2.configurationFile="$BENCH_DIR/log4j2-tools.properties" -cp "$LIBS/*" "$@"; }

# ---------------------------------------------------------------------------------------------
# Setup: jars, replicator binary, payloads, logging configs.

mkdir -p "$BENCH_DIR" "$BENCH_OUT"
spawn bash -c 'sleep "$1"; echo "benchmark timed out after $1 s" >&2; kill -TERM "$2"' watchdog "$BENCH_TIMEOUT" $$

log "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); results in $BENCH_OUT"
# The read-ahead of the disk under the brokers' logs. Kafka's index files are sparse and mmapped:
# each first touch of an index page faults, and the kernel zero-fills the whole read-ahead window.
# This VM's disk came with 8 MiB (Linux's default is 128 KiB): at 1,000 partitions the brokers then
# spent about half their CPU in that memset and took 22.6 MB/s from ProducerPerformance instead of
# 71.8 at 128 KiB (2026-12-07, BENCHMARKS.md). BENCH_READ_AHEAD_KB sets it for the run (root).
ra_dev=$(lsblk -no PKNAME "$(df --output=source "$BENCH_DIR" | tail -1)" 2>/dev/null || true)
[[ -n $ra_dev ]] || ra_dev=$(basename "$(df --output=source "$BENCH_DIR" | tail -1)")
ra_file=/sys/block/$ra_dev/queue/read_ahead_kb
if [[ -r $ra_file ]]; then
    if [[ -n ${BENCH_READ_AHEAD_KB:-} ]]; then
        echo "$BENCH_READ_AHEAD_KB" > "$ra_file" || die "cannot set $ra_file"
    fi
    log "read-ahead of $ra_dev (the brokers' disk): $(cat "$ra_file") KiB"
    (($(cat "$ra_file") > 512)) && log "WARNING: a read-ahead above 512 KiB makes the brokers' index page faults expensive; BENCH_READ_AHEAD_KB=128 sets Linux's default"
fi
[[ -d $LIBS ]] || (cd "$ROOT" && cargo run -q -p kafka-harness -- provision --version "$KAFKA_VERSION") || die "no Kafka jars in $LIBS"
if [[ ! -f $MM2_LIBS/connect-mirror-$MM2_VERSION.jar ]]; then
    log "fetching MirrorMaker 2 $MM2_VERSION from Maven Central"
    mvn -q -f "$HERE/mm2/pom.xml" dependency:copy-dependencies -Dkafka.version="$MM2_VERSION" \
        -DoutputDirectory="$MM2_LIBS" || die "maven"
fi
if [[ -z ${REPLICATE_BIN:-} ]]; then
    COMMIT=$(git -C "$ROOT" rev-parse "$BENCH_REV")
    # One fixed path, files stamped now (tar -m): cargo's freshness check goes by path and mtime.
    SRC_TREE="$CARGO_TARGET_DIR/bench-src"
    rm -rf "$SRC_TREE" && mkdir -p "$SRC_TREE"
    git -C "$ROOT" archive "$COMMIT" | tar -x -m -C "$SRC_TREE"
    log "building the replicator at $COMMIT (release)"
    (cd "$SRC_TREE" && nice cargo build -q --release --example replicate --bin kafka-mirror-proxy --bin kafka-mirrors) || die "cargo build"
    REPLICATE_BIN="$CARGO_TARGET_DIR/release/examples/replicate"
    PROXY_BIN="$CARGO_TARGET_DIR/release/kafka-mirror-proxy"
    MIRRORS_BIN="$CARGO_TARGET_DIR/release/kafka-mirrors"
else
    PROXY_BIN=${PROXY_BIN:-"$(dirname "$REPLICATE_BIN")/../kafka-mirror-proxy"}
    MIRRORS_BIN=${MIRRORS_BIN:-"$(dirname "$REPLICATE_BIN")/../kafka-mirrors"}
    COMMIT="(prebuilt $REPLICATE_BIN)"
fi
PAYLOADS="$BENCH_DIR/payloads.txt"
python3 "$HERE/payloads.py" "$PAYLOADS" "$RECORD_SIZE" 20000
for kind in broker tools; do
    target=$([[ $kind == broker ]] && echo SYSTEM_OUT || echo SYSTEM_ERR)
    level=$([[ $kind == broker ]] && echo INFO || echo WARN)
    cat > "$BENCH_DIR/log4j2-$kind.properties" <<EOF
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.target = $target
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = $level
rootLogger.appenderRef.console.ref = console
EOF
done

# ---------------------------------------------------------------------------------------------
# Clusters: one combined broker+controller each, Kafka's default JVM settings.

# free_port: a free loopback port below the kernel's ephemeral range (benches/proxy/benchlib.py).
free_port() { python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import benchlib; print(benchlib.free_port())' "$ROOT/benches/proxy"; }

# start_cluster NAME [KEY=VALUE...]: sets BOOTSTRAP and BROKER_PID.
start_cluster() {
    local name=$1; shift
    local dir="$BENCH_DIR/$name" port cport jmx id
    port=$(free_port); cport=$(free_port); jmx=$(free_port)
    id=$(python3 -c 'import base64,uuid
while True:
    s=base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"): print(s); break')
    mkdir -p "$dir"
    {
        echo "process.roles=broker,controller"
        echo "node.id=0"
        echo "controller.quorum.voters=0@127.0.0.1:$cport"
        echo "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
        echo "advertised.listeners=PLAINTEXT://127.0.0.1:$port"
        echo "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        echo "controller.listener.names=CONTROLLER"
        echo "inter.broker.listener.name=PLAINTEXT"
        echo "log.dirs=$dir/data"
        echo "num.partitions=1"
        echo "default.replication.factor=1"
        echo "offsets.topic.replication.factor=1"
        echo "transaction.state.log.replication.factor=1"
        echo "transaction.state.log.min.isr=1"
        echo "share.coordinator.state.topic.replication.factor=1"
        echo "share.coordinator.state.topic.min.isr=1"
        echo "group.initial.rebalance.delay.ms=0"
        echo "auto.create.topics.enable=false"
        for kv in "$@"; do echo "$kv"; done
    } > "$dir/server.properties"
    java -Xmx256m -Dlog4j2.configurationFile="$BENCH_DIR/log4j2-tools.properties" -cp "$LIBS/*" \
        kafka.tools.StorageTool format --cluster-id="$id" --config "$dir/server.properties" > /dev/null \
        || die "formatting $name"
    # shellcheck disable=SC2086
    # JMX on loopback, for the request metrics of jmx_snapshot.
    spawn java $BROKER_JVM_OPTS -Dlog4j2.configurationFile="$BENCH_DIR/log4j2-broker.properties" \
        -Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.port="$jmx" \
        -Dcom.sun.management.jmxremote.rmi.port="$jmx" -Dcom.sun.management.jmxremote.host=127.0.0.1 \
        -Djava.rmi.server.hostname=127.0.0.1 -Dcom.sun.management.jmxremote.authenticate=false \
        -Dcom.sun.management.jmxremote.ssl=false \
        -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" > "$BENCH_OUT/broker-$name.log" 2>&1
    BROKER_PID=$SPAWNED
    BROKER_JMX=$jmx
    BOOTSTRAP="127.0.0.1:$port"
    for _ in $(seq 900); do
        grep -q "Kafka Server started" "$BENCH_OUT/broker-$name.log" 2>/dev/null && break
        kill -0 "$BROKER_PID" 2>/dev/null || die "broker $name exited; see $BENCH_OUT/broker-$name.log"
        sleep 0.1
    done
    grep -q "Kafka Server started" "$BENCH_OUT/broker-$name.log" || die "broker $name did not start in 90 s"
    log "cluster $name up at $BOOTSTRAP (pid $BROKER_PID)"
}

# jmx_snapshot RUN_DIR LABEL DEST_JMX_PORT: request counts and mean times (Count, Mean of the
# brokers' RequestMetrics histograms) of Produce on the destination and Fetch on the source, into
# RUN_DIR/jmx-LABEL-{source,dest}.txt. Differences of two snapshots give a window's figures.
jmx_snapshot() {
    local run_dir=$1 label=$2 side port pids=()
    for side in source dest; do
        port=$([[ $side == source ]] && echo "$SOURCE_JMX" || echo "$3")
        java_tool org.apache.kafka.tools.JmxTool --jmx-url "service:jmx:rmi:///jndi/rmi://127.0.0.1:$port/jmxrmi" \
            --one-time true --report-format properties --attributes Count,Mean \
            --object-name 'kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce' \
            --object-name 'kafka.network:type=RequestMetrics,name=LocalTimeMs,request=Produce' \
            --object-name 'kafka.network:type=RequestMetrics,name=RequestQueueTimeMs,request=Produce' \
            --object-name 'kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Fetch' \
            > "$run_dir/jmx-$label-$side.txt" 2>/dev/null &
        pids+=("$!")
    done
    wait "${pids[@]}" || log "  (JMX snapshot $label incomplete)"
}

# scan_logs RUN_DIR CLUSTER TOPIC...: batches and records per batch on disk (logscan.py).
scan_logs() {
    local run_dir=$1 cluster=$2; shift 2
    python3 "$HERE/logscan.py" "$BENCH_DIR/$cluster/data" "$@" > "$run_dir/logscan-$cluster.json"
}

create_topic() { # bootstrap topic [partitions, default PARTITIONS]
    java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$1" --create --topic "$2" \
        --partitions "${3:-$PARTITIONS}" --replication-factor 1 > /dev/null || die "creating topic $2"
}

# produce BOOTSTRAP TOPIC RECORDS THROUGHPUT OUTFILE: ProducerPerformance with the shared settings,
# in the background under /usr/bin/time; sets SPAWNED.
produce() {
    # shellcheck disable=SC2086
    spawn /usr/bin/time -f '%e %U %S %M' -o "$5.time" \
        java $CLIENT_JVM_OPTS -Xmx512m -Dlog4j2.configurationFile="$BENCH_DIR/log4j2-tools.properties" \
        -cp "$LIBS/*" org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$1" --topic "$2" \
        --num-records "$3" --throughput "$4" --payload-file "$PAYLOADS" --reporting-interval 10000 \
        --command-property $PRODUCER_PROPS > "$5" 2>&1
}

# ---------------------------------------------------------------------------------------------
# Sampling: the probe (end offsets) and CPU ticks of named processes.

# start_probe RUN_DIR DEST TOPIC...: sets PROBE_PID.
start_probe() {
    local run_dir=$1 dest=$2; shift 2
    spawn java $CLIENT_JVM_OPTS -Xmx256m -Dlog4j2.configurationFile="$BENCH_DIR/log4j2-tools.properties" \
        -cp "$LIBS/*" "$HERE/OffsetProbe.java" "$SOURCE" "$dest" "$PROBE_MS" "$run_dir/probe.txt" "$@" \
        > "$run_dir/probe.log" 2>&1
    PROBE_PID=$SPAWNED
    for _ in $(seq 600); do
        grep -q ' D ' "$run_dir/probe.txt" 2>/dev/null && return 0
        kill -0 "$PROBE_PID" 2>/dev/null || die "probe exited: $(tail -5 "$run_dir/probe.log")"
        sleep 0.1
    done
    die "probe gave no sample in 60 s"
}

# start_cpu_sampler RUN_DIR: every 0.5 s, ticks (utime+stime+cutime+cstime) of each process named in
# RUN_DIR/pids ("name pid" lines, re-read each time; see track) and of the machine; sets SAMPLER_PID.
start_cpu_sampler() {
    local run_dir=$1
    touch "$run_dir/pids"
    spawn bash -c '
        out=$1 pids=$2
        while true; do
            t=${EPOCHREALTIME/./}; line="$((t / 1000))"
            while read -r name pid; do
                if { read -r st < "/proc/$pid/stat"; } 2>/dev/null; then
                    read -ra f <<< "${st##*) }"
                    line+=" $name=$((f[11] + f[12] + f[13] + f[14]))"
                fi
            done < "$pids"
            read -r _ u n s i w q sq st _ < /proc/stat
            line+=" machine_busy=$((u + n + s + q + sq + st)) machine_total=$((u + n + s + i + w + q + sq + st))"
            echo "$line" >> "$out"
            sleep 0.5
        done' cpu-sampler "$run_dir/cpu.txt" "$run_dir/pids"
    SAMPLER_PID=$SPAWNED
}

track() { echo "$2 $3" >> "$1/pids"; }   # track RUN_DIR NAME PID: sample PID's CPU as NAME

event() { echo "$1 $(now_ms)" >> "$2/events.txt"; }

# wait_copied RUN_DIR TOPIC RECORDS TIMEOUT_S COPIER_PID
wait_copied() {
    local deadline=$((SECONDS + $4)) n=0 last=-1
    while ((SECONDS < deadline)); do
        n=$(python3 "$HERE/analyze.py" progress "$1" "$2")
        ((n >= $3)) && return 0
        kill -0 "$5" 2>/dev/null || die "copier exited before copying $2 ($n of $3 records)"
        if ((n != last)) && ((SECONDS % 10 == 0)); then log "  $2: $n of $3 records"; last=$n; fi
        sleep 1
    done
    die "$2 not copied within $4 s ($n of $3 records)"
}

# wait_caught_up RUN_DIR TOPIC TIMEOUT_S: true once the destination has every source record; false
# after the timeout, or at once if an MM2 task died (it does not restart by itself).
wait_caught_up() {
    local deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        [[ $(python3 "$HERE/analyze.py" caught_up "$1" "$2") == 1 ]] && return 0
        if grep -q "Task is being killed" "$1/mm2.log" 2>/dev/null; then
            log "  an MM2 task died: $(grep -m1 -A20 'Task is being killed' "$1/mm2.log" | grep -m1 '^Caused by')"
            return 1
        fi
        sleep 1
    done
    return 1
}

# lag_phase RUN_DIR TOPIC RATE COPIER_NAME DEST_JMX: a producer at RATE records/s into TOPIC on the
# source for LAG_WARMUP_SECONDS + LAG_SECONDS; lag measured after the warm-up; writes
# RUN_DIR/lag-TOPIC.json.
lag_phase() {
    local run_dir=$1 topic=$2 rate=$3 copier=$4 dest_jmx=$5 start end
    log "  lag phase: $topic at $rate records/s for $LAG_WARMUP_SECONDS + $LAG_SECONDS s"
    jmx_snapshot "$run_dir" "lag0-$topic" "$dest_jmx"
    event "lag_start:$topic" "$run_dir"
    start=$(now_ms)
    produce "$SOURCE" "$topic" $((rate * (LAG_WARMUP_SECONDS + LAG_SECONDS))) "$rate" "$run_dir/lag-producer-$topic.txt"
    local producer=$SPAWNED
    sleep 0.2
    track "$run_dir" "lag_producer_$topic" "$(pgrep -P "$producer" | head -1)"
    wait "$producer" || die "lag producer failed: $(tail -3 "$run_dir/lag-producer-$topic.txt")"
    end=$(now_ms)
    event "lag_end:$topic" "$run_dir"
    if ! wait_caught_up "$run_dir" "$topic" 300; then
        log "  $copier did not catch up on $topic (bound: 300 s)"
    fi
    event "caught_up:$topic" "$run_dir"
    jmx_snapshot "$run_dir" "lag1-$topic" "$dest_jmx"
    python3 "$HERE/analyze.py" lag "$run_dir" "$topic" $((start + LAG_WARMUP_SECONDS * 1000)) "$end" "$copier" \
        > "$run_dir/lag-$topic.json"
    log "  $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("lag: %s records/s, offset lag p50 %s p99 %s, delay ms p50 %s p99 %s, never caught up %s of %s" % (round(d["source_records_s"] or 0), d["offset_lag_p50"], d["offset_lag_p99"], d["delay_ms_p50"], d["delay_ms_p99"], d["samples_never_caught_up"], d["samples"]))' "$run_dir/lag-$topic.json")"
}

# ---------------------------------------------------------------------------------------------
# Source: fill the topic once.

log "source: $RECORDS records of $RECORD_SIZE bytes, $PARTITIONS partitions, lz4, batch.size=$BATCH_SIZE linger.ms=$LINGER_MS"
start_cluster source
SOURCE=$BOOTSTRAP
SOURCE_PID=$BROKER_PID
SOURCE_JMX=$BROKER_JMX
LAG_TOPICS=""
((BENCH_LAG == 1)) && LAG_TOPICS="lag-replicator-idle lag-replicator-hi lag-replicator-lo lag-mm2-hi lag-mm2-lo"
for t in bench $LAG_TOPICS; do create_topic "$SOURCE" "$t"; done
if ((BENCH_WARMUP_COPY == 1)); then
    create_topic "$SOURCE" warmup 12
    produce "$SOURCE" warmup "$BENCH_WARMUP_RECORDS" -1 "$BENCH_OUT/fill-warmup.txt"
    wait "$SPAWNED" || die "filling the warm-up topic: $(tail -5 "$BENCH_OUT/fill-warmup.txt")"
fi
produce "$SOURCE" bench "$RECORDS" -1 "$BENCH_OUT/fill-producer.txt"
wait "$SPAWNED" || die "filling the source: $(tail -5 "$BENCH_OUT/fill-producer.txt")"
log "source filled: $(grep 'records sent' "$BENCH_OUT/fill-producer.txt" | tail -1)"
# ProducerPerformance counts only acknowledged records; at 1,000 partitions some fills timed out a
# few batches (2026-12-07: 976,439 of 976,562), and waiting for records that are not there never ends.
sent=$(grep -o '^[0-9]* records sent' "$BENCH_OUT/fill-producer.txt" | tail -1 | cut -d' ' -f1)
if ((sent < RECORDS)); then
    log "WARNING: the source holds $sent of $RECORDS records (the fill's errors: $(grep -c Exception "$BENCH_OUT/fill-producer.txt")); every copy is measured on $sent"
    RECORDS=$sent
fi
if ((BENCH_WARMUP_RECORDS > 0)); then
    # The source's fetch path, compiled before the first copier reads (see warm_up_destination).
    # shellcheck disable=SC2086
    java_tool org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$SOURCE" --topic bench \
        --num-records "$BENCH_WARMUP_RECORDS" --timeout 60000 --group "bench-warmup-$$" \
        --command-property $CONSUMER_PROPS > "$BENCH_OUT/warmup-consumer.txt" 2>&1 \
        || die "warming up the source: $(tail -5 "$BENCH_OUT/warmup-consumer.txt")"
fi
cat "$BENCH_DIR"/source/data/bench-*/*.log | wc -c | awk '{printf "source topic on disk (lz4 batches): %.0f MB\n", $1/1e6}' | tee "$BENCH_OUT/source-size.txt" >&2

# ---------------------------------------------------------------------------------------------
# Copiers: start_copier KIND RUN_DIR DEST TOPIC... sets COPIER_PID; stop_copier KIND PID.
#   replicator: the `replicate` example, release build (read_committed, the library's defaults
#               except fetch_max_wait = 100 ms, as the tool sets it).
#   mm2:        MirrorMaker 2 dedicated mode, IdentityReplicationPolicy, tasks.max = PARTITIONS.

start_copier() {
    local kind=$1 run_dir=$2 dest=$3; shift 3
    case $kind in
        replicator)
            spawn "$REPLICATE_BIN" --source "$SOURCE" --destination "$dest" "$@" \
                > "$run_dir/status.jsonl" 2> "$run_dir/replicate.log"
            ;;
        proxy)
            local port metrics t
            port=$(free_port); metrics=$(free_port)
            spawn env RUST_LOG=warn KMP_PROXY__LISTEN="127.0.0.1:$port" KMP_PROXY__BROKER_PORT_BASE=0 \
                KMP_DESTINATION__BOOTSTRAP_SERVERS="$dest" KMP_ADMIN__METRICS_LISTEN="127.0.0.1:$metrics" \
                "$PROXY_BIN" --config "$ROOT/proxy.yaml" > "$run_dir/proxy.log" 2>&1
            for _ in $(seq 600); do
                curl -sf "http://127.0.0.1:$metrics/health" > /dev/null 2>&1 && break
                sleep 0.1
            done
            echo "bootstrap.servers=$SOURCE" > "$run_dir/mirror.properties"
            "$MIRRORS_BIN" --bootstrap-server "127.0.0.1:$port" --create --mirror "${MIRROR_NAME:-bench}" \
                --mirror-config "$run_dir/mirror.properties" > /dev/null || die "kafka-mirrors --create"
            for t in "$@"; do
                "$MIRRORS_BIN" --bootstrap-server "127.0.0.1:$port" --add --mirror "${MIRROR_NAME:-bench}" --topic "$t" > /dev/null \
                    || die "kafka-mirrors --add $t"
            done
            ;;
        mm2)
            local topics
            topics=$(IFS=,; echo "$*")
            cat > "$run_dir/mm2.properties" <<EOF
# MirrorMaker 2, dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker), one flow A -> B.
clusters = A, B
A.bootstrap.servers = $SOURCE
B.bootstrap.servers = $dest
A->B.enabled = true
A->B.topics = $topics
B->A.enabled = false
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
tasks.max = $MM2_TASKS
# Single-broker clusters.
replication.factor = 1
heartbeats.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
# Only the data copy is measured: no heartbeats, checkpoints, group offset or ACL sync, offset syncs.
# (MirrorCheckpointConnector then logs that it cannot be configured; expected.)
emit.heartbeats.enabled = false
emit.checkpoints.enabled = false
sync.group.offsets.enabled = false
sync.topic.acls.enabled = false
emit.offset-syncs.enabled = false
# Throughput settings (producer into B, consumer from A), the same as every other client here.
$(for kv in $PRODUCER_PROPS; do echo "B.producer.$kv"; done)
$(for kv in $CONSUMER_PROPS; do echo "A.consumer.$kv"; done)
offset.flush.timeout.ms = 10000
EOF
            sed 's/^rootLogger.level = WARN/rootLogger.level = INFO/; s/SYSTEM_ERR/SYSTEM_OUT/' \
                "$BENCH_DIR/log4j2-tools.properties" > "$run_dir/log4j2.properties"
            # connect-mirror-maker.sh: KAFKA_HEAP_OPTS="-Xms256M -Xmx2G".
            # shellcheck disable=SC2086
            spawn java $CLIENT_JVM_OPTS -Xms256m -Xmx2g -Dlog4j2.configurationFile="$run_dir/log4j2.properties" \
                -cp "$MM2_LIBS/*" org.apache.kafka.connect.mirror.MirrorMaker "$run_dir/mm2.properties" \
                > "$run_dir/mm2.log" 2>&1
            ;;
    esac
    COPIER_PID=$SPAWNED
}

stop_copier() {
    local kind=$1 pid=$2 run_dir=$3
    grep -m1 VmHWM "/proc/$pid/status" > "$run_dir/copier-rss.txt" 2>/dev/null || true
    if [[ $kind == replicator ]]; then
        grep -o '"state":"FAILED"[^}]*' "$run_dir/status.jsonl" | sort -u | head -5 > "$run_dir/failed.txt" || true
        [[ -s $run_dir/failed.txt ]] && log "  WARNING: partitions FAILED: $(head -1 "$run_dir/failed.txt")"
        stop "$pid" INT
    else
        stop "$pid"
    fi
}

# warm_up_destination RUN_DIR: BENCH_WARMUP_RECORDS records into a topic of its own on the fresh
# destination (ProducerPerformance, the shared producer settings), so that the broker's produce path
# (request parsing, lz4 validation, log append) is compiled before a copier is measured, as in a
# destination that has been running for a while. Measured during a 2 GB copy by the proxy, the JIT
# compiler threads took 0.66 of the brokers' 1.5 busy cores without it, and still 0.52 with it: the
# copier's requests take paths and types the perf producer's do not (BENCHMARKS.md, BENCH_PROFILE=1).
warm_up_destination() {
    ((BENCH_WARMUP_RECORDS > 0)) || return 0
    create_topic "$DEST" warmup 12
    produce "$DEST" warmup "$BENCH_WARMUP_RECORDS" -1 "$1/warmup-producer.txt"
    wait "$SPAWNED" || die "warming up the destination: $(tail -5 "$1/warmup-producer.txt")"
}

# topic_total BOOTSTRAP TOPIC: the sum of the topic's end offsets.
topic_total() {
    java_tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$1" --topic "$2" 2>/dev/null \
        | awk -F: '{s += $NF} END {print s + 0}'
}

# warm_up_copier KIND: a copier of KIND (a process of its own, mirror `warmup` for the proxy) copies
# the source's `warmup` topic into the fresh destination and is stopped once it has, before the
# measured copier starts. The brokers then have compiled the paths this kind of copier's requests
# take (ProducerPerformance's warm-up leaves them a third of the compilation: BENCHMARKS.md).
warm_up_copier() {
    local kind=$1 dir="$RUN_DIR/warmup" want have=0
    mkdir -p "$dir"
    want=$(topic_total "$SOURCE" warmup)
    MIRROR_NAME=warmup start_copier "$kind" "$dir" "$DEST" warmup
    local copier=$COPIER_PID deadline=$((SECONDS + 900))
    while ((SECONDS < deadline)); do
        have=$(topic_total "$DEST" warmup)
        ((have >= want)) && break
        kill -0 "$copier" 2>/dev/null || die "$kind warm-up copier exited"
        sleep 1
    done
    ((have >= want)) || die "$kind warm-up copy incomplete after 900 s ($have of $want records)"
    stop_copier "$kind" "$copier" "$dir"
    log "  $kind warm-up: copied $want records of topic warmup"
}

# begin_run NAME: a fresh destination cluster (warmed up), the probe on TOPICS, the CPU sampler. Sets RUN_DIR,
# DEST, DEST_PID, DEST_JMX, PROBE_PID, SAMPLER_PID.
begin_run() {
    local name=$1; shift
    RUN_DIR="$BENCH_OUT/$name"
    mkdir -p "$RUN_DIR"
    start_cluster "dest-$name" transaction.partition.verification.enable=false
    DEST=$BOOTSTRAP DEST_PID=$BROKER_PID DEST_JMX=$BROKER_JMX
    warm_up_destination "$RUN_DIR"
    start_probe "$RUN_DIR" "$DEST" "$@"
    start_cpu_sampler "$RUN_DIR"
    track "$RUN_DIR" source_broker "$SOURCE_PID"; track "$RUN_DIR" dest_broker "$DEST_PID"; track "$RUN_DIR" probe "$PROBE_PID"
}

end_run() { # name topic...
    local name=$1; shift
    scan_logs "$RUN_DIR" "dest-$name" "$@"
    stop "$SAMPLER_PID"; stop "$PROBE_PID"; stop "$DEST_PID"
    rm -rf "$BENCH_DIR/dest-$name"
}

declare -A RATE   # highest steady records/s per copier kind

# profile_brokers start|stop RUN_DIR: per-thread CPU (threads.py) of both brokers between start and
# stop, and with BENCH_PROFILE=jfr a JFR recording; the report is RUN_DIR/broker-profile.md.
profile_brokers() {
    local what=$1 run_dir=$2 side pid
    for side in source dest; do
        pid=$([[ $side == source ]] && echo "$SOURCE_PID" || echo "$DEST_PID")
        if [[ $what == start ]]; then
            PROFILE_T0=$(now_ms)
            python3 "$HERE/threads.py" snap "$pid" "$run_dir/threads-$side-0.json"
            [[ $BENCH_PROFILE == jfr ]] && jcmd "$pid" JFR.start name=bench settings=profile filename="$run_dir/$side.jfr" > /dev/null
        else
            python3 "$HERE/threads.py" snap "$pid" "$run_dir/threads-$side-1.json"
            [[ $BENCH_PROFILE == jfr ]] && jcmd "$pid" JFR.stop name=bench > /dev/null
        fi
    done
    [[ $what == stop ]] || return 0
    local seconds
    seconds=$(python3 -c "print(($(now_ms) - $PROFILE_T0) / 1000)")
    for side in source dest; do
        echo "## $side broker, $seconds s of the copy"
        echo
        python3 "$HERE/threads.py" diff "$run_dir/threads-$side-0.json" "$run_dir/threads-$side-1.json" "$seconds"
        echo
        [[ $BENCH_PROFILE == jfr ]] && python3 "$HERE/threads.py" jfr "$run_dir/$side.jfr"
        echo
    done > "$run_dir/broker-profile.md" 2>&1
    log "  broker profile: $run_dir/broker-profile.md"
}

# run_bulk KIND NAME [IDLE_LAG_TOPIC]: copy bench into a fresh destination and measure; with
# IDLE_LAG_TOPIC (replicator only), then a lag phase on that topic by the same copier, with the
# bench partitions now idle.
run_bulk() {
    local kind=$1 name=$2 idle=${3:-}
    local topics=(bench)
    [[ -n $idle ]] && topics+=("$idle")
    begin_run "$name" "${topics[@]}"
    ((BENCH_WARMUP_COPY == 1)) && warm_up_copier "$kind"
    jmx_snapshot "$RUN_DIR" bulk0 "$DEST_JMX"
    event copier_start "$RUN_DIR"
    start_copier "$kind" "$RUN_DIR" "$DEST" "${topics[@]}"
    local copier=$COPIER_PID perf=""
    track "$RUN_DIR" copier "$copier"
    if [[ ${BENCH_PERF:-0} == 1 && $name == *-1 && $kind != mm2 ]]; then
        spawn perf record -q -F 999 -g -p "$copier" -o "$RUN_DIR/perf.data"
        perf=$SPAWNED
    fi
    [[ $BENCH_PROFILE != 0 && $name == *-1 ]] && profile_brokers start "$RUN_DIR"
    wait_copied "$RUN_DIR" bench "$RECORDS" 3600 "$copier"
    event bulk_done "$RUN_DIR"
    [[ $BENCH_PROFILE != 0 && $name == *-1 ]] && profile_brokers stop "$RUN_DIR"
    if [[ -n $perf ]]; then
        stop "$perf" INT
        { perf report -i "$RUN_DIR/perf.data" --stdio --no-children -g none --sort dso 2>/dev/null
          perf report -i "$RUN_DIR/perf.data" --stdio --no-children -g none --percent-limit 1 2>/dev/null
        } | grep -v '^#' | grep -v '^$' > "$RUN_DIR/perf-report.txt" || true
    fi
    jmx_snapshot "$RUN_DIR" bulk1 "$DEST_JMX"
    python3 "$HERE/analyze.py" bulk "$RUN_DIR" bench "$RECORDS" "$RECORD_SIZE" "$kind" > "$RUN_DIR/bulk.json"
    local rate
    rate=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1])).get("steady_records_s", 0)))' "$RUN_DIR/bulk.json")
    ((rate > ${RATE[$kind]:-0})) && RATE[$kind]=$rate
    log "  $name: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["cores_busy_steady"]; print("%.1f MB/s steady, %.1f CPU-s/GB (copier, steady), cores busy: copier %.2f, brokers %.2f, machine %.2f" % (d["steady_mb_s"], d["cpu_s_per_gb_steady"]["copier"], c.get("copier", 0), c.get("source_broker", 0) + c.get("dest_broker", 0), c["machine_busy"]))' "$RUN_DIR/bulk.json")"
    if [[ -n $idle ]]; then
        lag_phase "$RUN_DIR" "$idle" $((RATE[$kind] / 2)) "$kind" "$DEST_JMX"
    fi
    stop_copier "$kind" "$copier" "$RUN_DIR"
    end_run "$name" "${topics[@]}"
}

# run_lag KIND NAME TOPIC RATE: a fresh copier mirroring only TOPIC (12 partitions), then a lag phase.
run_lag() {
    local kind=$1 name=$2 topic=$3 rate=$4
    begin_run "$name" "$topic"
    event copier_start "$RUN_DIR"
    start_copier "$kind" "$RUN_DIR" "$DEST" "$topic"
    local copier=$COPIER_PID
    track "$RUN_DIR" copier "$copier"
    # Ready once the destination topic exists (created by the copier), plus time for its tasks.
    for _ in $(seq 1200); do
        tail -n 1 "$RUN_DIR/probe.txt" | grep -q "^[0-9]* D $topic:[0-9]" && break
        kill -0 "$copier" 2>/dev/null || die "$name: copier exited"
        sleep 0.1
    done
    sleep 10
    lag_phase "$RUN_DIR" "$topic" "$rate" "$kind" "$DEST_JMX"
    stop_copier "$kind" "$copier" "$RUN_DIR"
    end_run "$name" "$topic"
}

# ---------------------------------------------------------------------------------------------
# The raw limit: consumer-perf on the source while producer-perf writes a fresh destination.

run_raw() {
    local name=$1
    begin_run "$name" bench
    create_topic "$DEST" bench
    jmx_snapshot "$RUN_DIR" bulk0 "$DEST_JMX"
    event copier_start "$RUN_DIR"
    # shellcheck disable=SC2086
    spawn /usr/bin/time -f '%e %U %S %M' -o "$RUN_DIR/consumer.txt.time" \
        java $CLIENT_JVM_OPTS -Xmx512m -Dlog4j2.configurationFile="$BENCH_DIR/log4j2-tools.properties" \
        -cp "$LIBS/*" org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$SOURCE" --topic bench \
        --num-records "$RECORDS" --timeout 60000 --group "bench-$name-$$" --command-property $CONSUMER_PROPS \
        > "$RUN_DIR/consumer.txt" 2>&1
    local consumer=$SPAWNED
    produce "$DEST" bench "$RECORDS" -1 "$RUN_DIR/producer.txt"
    local producer=$SPAWNED
    sleep 0.2
    # /usr/bin/time's child is the JVM.
    track "$RUN_DIR" consumer "$(pgrep -P "$consumer" | head -1)"
    track "$RUN_DIR" producer "$(pgrep -P "$producer" | head -1)"
    wait "$consumer" || die "consumer-perf failed: $(tail -3 "$RUN_DIR/consumer.txt")"
    event consumer_done "$RUN_DIR"
    wait "$producer" || die "producer-perf failed: $(tail -3 "$RUN_DIR/producer.txt")"
    event producer_done "$RUN_DIR"
    wait_copied "$RUN_DIR" bench "$RECORDS" 60 "$PROBE_PID"
    event bulk_done "$RUN_DIR"
    jmx_snapshot "$RUN_DIR" bulk1 "$DEST_JMX"
    python3 "$HERE/analyze.py" bulk "$RUN_DIR" bench "$RECORDS" "$RECORD_SIZE" raw > "$RUN_DIR/bulk.json"
    log "  $name: consumer $(tail -1 "$RUN_DIR/consumer.txt")"
    log "  $name: producer $(grep 'records sent' "$RUN_DIR/producer.txt" | tail -1)"
    end_run "$name" bench
}

# ---------------------------------------------------------------------------------------------
# The runs: bulk copies (repeated BENCH_REPEAT times, alternating, as other load on the machine
# varies), then the lag phases, each copier mirroring only its lag topic.

for ((i = 1; i <= BENCH_REPEAT; i++)); do
    log "bulk copies, round $i of $BENCH_REPEAT"
    idle=""
    ((i == 1 && BENCH_LAG == 1)) && idle=lag-replicator-idle
    for kind in $BENCH_KINDS; do
        case $kind in
            replicator) run_bulk replicator "replicator-$i" $idle ;;
            proxy) run_bulk proxy "proxy-$i" ;;
            mm2) run_bulk mm2 "mm2-$i" ;;
            raw) run_raw "raw-$i" ;;
            *) die "unknown kind $kind in BENCH_KINDS" ;;
        esac
    done
done
if ((BENCH_LAG == 1)); then
    [[ -n ${RATE[replicator]:-} && -n ${RATE[mm2]:-} ]] || die "the lag phases need the replicator and mm2 bulk copies"
    log "lag phases: replicator at ${RATE[replicator]} records/s max, MM2 at ${RATE[mm2]} records/s max"
    run_lag replicator lag-replicator-hi lag-replicator-hi $((RATE[replicator] / 2))
    run_lag mm2 lag-mm2-hi lag-mm2-hi $((RATE[replicator] / 2))
    run_lag replicator lag-replicator-lo lag-replicator-lo $((RATE[mm2] / 2))
    run_lag mm2 lag-mm2-lo lag-mm2-lo $((RATE[mm2] / 2))
fi

# shellcheck disable=SC2086
scan_logs "$BENCH_OUT" source bench $LAG_TOPICS
python3 "$HERE/report.py" "$BENCH_OUT" "$RECORDS" "$RECORD_SIZE" "$COMMIT" > "$BENCH_OUT/summary.md"
cat "$BENCH_OUT/summary.md"
exit
}
