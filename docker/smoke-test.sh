#!/usr/bin/env bash
# Runs the image between two real Kafka clusters on this host and checks what an operator relies on:
# it runs as uid 10001, KMP_* variables override the built-in proxy.yaml, /health answers the Compose
# health check's request, the image's kafka-mirrors creates a mirror and adds a topic through the proxy,
# the copy is exact (kafka-mirrors --verify from the image, and a Java consumer through the proxy), the
# metrics are served, and SIGTERM (`podman stop`) ends the proxy cleanly.
#
#   bash docker/smoke-test.sh [IMAGE]          (default localhost/kafka-mirror-proxy:dev, docker/build-offline.sh's)
#
# Needs podman, the harness's Kafka (`cargo run -p kafka-harness -- provision`), Java. Containers use the
# host's network (the clusters listen on loopback). Where podman's defaults do not fit the host, pass
# options: PODMAN_OPTS (global, e.g. "--runtime runc --cgroup-manager cgroupfs" on a cgroup v1 host) and
# PODMAN_RUN_OPTS (e.g. "--ulimit nofile=20000:20000 --ulimit nproc=4096:4096" where the host's limits
# are below podman's defaults and cannot be raised). Output and logs: target/image-smoke/.
set -euo pipefail

image=${1:-localhost/kafka-mirror-proxy:dev}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$repo/target/image-smoke
version=${KAFKA_VERSION:-4.4.0}
libs=$repo/target/kafka/$version/libs
# shellcheck disable=SC2206 # word splitting of the option strings is the point
podman=(podman ${PODMAN_OPTS:-})
# shellcheck disable=SC2206
run_opts=(${PODMAN_RUN_OPTS:-})
name=kmp-smoke-$$
port=${SMOKE_PROXY_PORT:-39192}
metrics_port=$((port - 2))
records=20000

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

[ -d "$libs" ] || fail "no Kafka $version jars in $libs: run cargo run -p kafka-harness -- provision --version $version"
rm -rf "$work" && mkdir -p "$work"
cargo build --quiet -p kafka-harness --manifest-path "$repo/Cargo.toml"
harness=$repo/target/debug/kafka-harness

pids=()
cleanup() {
    "${podman[@]}" rm -f "$name" >/dev/null 2>&1 || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

# A cluster from the harness, in the background until this script ends; prints its bootstrap.
cluster() {
    local label=$1
    shift
    "$harness" up --name "smoke-$label" "$@" > "$work/$label.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 240); do
        grep -q '^running' "$work/$label.out" && break
        kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/$label.out" >&2; fail "the $label cluster did not start"; }
        sleep 0.5
    done
    grep -q '^running' "$work/$label.out" || fail "the $label cluster did not start within 120 s"
}

# The image's own kafka-mirrors, in a throwaway container next to the proxy.
mirrors() {
    "${podman[@]}" run --rm --network host "${run_opts[@]}" -v "$work/mirror.properties:/etc/kafka-mirror-proxy/mirror.properties:ro" \
        "$image" kafka-mirrors --bootstrap-server "127.0.0.1:$port" "$@"
}

java_tool() { java -cp "$libs/*" "$@"; }

step "image $image"
user=$("${podman[@]}" image inspect -f '{{.Config.User}}' "$image")
[ "$user" = 10001:10001 ] || fail "the image runs as '$user', not 10001:10001"
"${podman[@]}" image inspect -f '{{.Size}}' "$image" | awk '{printf "   size %.0f MB, user 10001:10001\n", $1 / 1e6}'

step "source and destination clusters (Kafka $version)"
cluster source
cluster destination --prop transaction.partition.verification.enable=false
source=$(sed -n 's/^bootstrap=//p' "$work/source.out")
destination=$(sed -n 's/^bootstrap=//p' "$work/destination.out")
echo "   source $source, destination $destination"
echo "bootstrap.servers=$source" > "$work/mirror.properties"

java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$source" --create --topic smoke.orders \
    --partitions 3 --replication-factor 1 > /dev/null
# Half of the records before the mirror exists, half while it copies.
produce() {
    java_tool org.apache.kafka.tools.ProducerPerformance --topic smoke.orders --num-records $((records / 2)) \
        --record-size 200 --throughput -1 --producer-props bootstrap.servers="$source" acks=all \
        compression.type=lz4 > "$work/producer-$1.out" 2>&1 || { cat "$work/producer-$1.out" >&2; fail "producer $1"; }
}
produce 1

step "the proxy in a container (KMP_* overrides of the image's proxy.yaml)"
"${podman[@]}" run -d --name "$name" --network host "${run_opts[@]}" \
    -e KMP_PROXY__LISTEN="127.0.0.1:$port" \
    -e KMP_ADMIN__METRICS_LISTEN="127.0.0.1:$metrics_port" \
    -e KMP_DESTINATION__BOOTSTRAP_SERVERS="$destination" \
    -e RUST_LOG=info \
    "$image" > /dev/null
healthy=false
for _ in $(seq 120); do
    # docker/compose.yaml's health check, run inside the container.
    if "${podman[@]}" exec "$name" bash -c "exec 3<>/dev/tcp/127.0.0.1/$metrics_port && printf 'GET /health HTTP/1.0\r\n\r\n' >&3 && head -n 1 <&3 | grep -q ' 200 '" 2>/dev/null; then
        healthy=true
        break
    fi
    [ "$("${podman[@]}" inspect -f '{{.State.Running}}' "$name")" = true ] || break
    sleep 0.5
done
"$healthy" || { "${podman[@]}" logs "$name" >&2; fail "the proxy did not report healthy within 60 s"; }
uid=$("${podman[@]}" exec "$name" sh -c 'stat -c %u /proc/1')
[ "$uid" = 10001 ] || fail "the proxy runs as uid $uid"
echo "   healthy; process uid $uid; listening on $port (KMP_PROXY__LISTEN)"

# Prometheus (Debian's package) scraping the container with docker/prometheus's alert rules, so the
# dashboard's queries can be run against what the image exports. Skipped where it is not installed.
prometheus_port=$((port - 3))
if command -v prometheus > /dev/null; then
    step "Prometheus $(prometheus --version 2>&1 | awk 'NR == 1 { print $3 }') scraping the proxy every second"
    promtool check rules "$repo/docker/prometheus/alerts.yml"
    cat > "$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["$repo/docker/prometheus/alerts.yml"]
scrape_configs:
  - job_name: kafka-mirror-proxy
    static_configs: [{targets: ["127.0.0.1:$metrics_port"]}]
YAML
    prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
        --web.listen-address="127.0.0.1:$prometheus_port" > "$work/prometheus.log" 2>&1 &
    pids+=($!)
else
    echo "   (prometheus not installed: the dashboard's queries are not run; apt-get install prometheus)"
fi

step "kafka-mirrors from the image: --create, --add"
mirrors --create --mirror smoke --mirror-config /etc/kafka-mirror-proxy/mirror.properties
mirrors --add --mirror smoke --topic 'smoke\..*'
if command -v prometheus > /dev/null; then
    # The second half is copied while Prometheus watches, so the copy-rate panels have a rate to show.
    python3 "$repo/docker/check-queries.py" "http://127.0.0.1:$prometheus_port" \
        --wait-series kafka_mirror_proxy_mirror_copied_records_total
fi
produce 2

step "copy: until every partition is MIRRORING with no lag"
for _ in $(seq 240); do
    mirrors --describe --mirror smoke > "$work/describe.out" 2>&1 || true
    rows=$(awk '$2 == "smoke.orders"' "$work/describe.out" | wc -l)
    mirroring=$(awk '$2 == "smoke.orders" && $NF == "MIRRORING"' "$work/describe.out" | wc -l)
    java_tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "127.0.0.1:$port" --topic smoke.orders \
        > "$work/offsets.out" 2>/dev/null || true
    copied=$(awk -F: '{ s += $3 } END { print s + 0 }' "$work/offsets.out")
    [ "$rows" = 3 ] && [ "$mirroring" = 3 ] && [ "$copied" = "$records" ] && break
    sleep 0.5
done
cat "$work/describe.out"
if [ "$mirroring" != 3 ] || [ "$copied" != "$records" ]; then
    fail "after 120 s: $mirroring of 3 partitions MIRRORING, $copied of $records records on the destination"
fi

step "kafka-mirrors --verify from the image"
mirrors --verify --mirror smoke | tee "$work/verify.out"

step "a Java consumer through the proxy"
java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "127.0.0.1:$port" --topic smoke.orders \
    --from-beginning --max-messages "$records" --timeout-ms 30000 --consumer-property isolation.level=read_committed \
    > "$work/consumed.out" 2> "$work/consumer.err" || true
# ProducerPerformance's values are 200 capital letters; the tool also prints notices to stdout.
consumed=$(grep -cE '^[A-Z]{200}$' "$work/consumed.out" || true)
[ "$consumed" = "$records" ] || { tail "$work/consumer.err" >&2; fail "the consumer read $consumed of $records records"; }
echo "   $consumed records"

step "metrics"
"${podman[@]}" exec "$name" bash -c "exec 3<>/dev/tcp/127.0.0.1/$metrics_port && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3" \
    > "$work/metrics.out"
grep -E '^kafka_mirror_proxy_mirror_partitions\{.*state="MIRRORING".*\} 3$' "$work/metrics.out" \
    || fail "no kafka_mirror_proxy_mirror_partitions{state=\"MIRRORING\"} 3 in /metrics"

if command -v prometheus > /dev/null; then
    step "every dashboard query and alert rule, evaluated by Prometheus on the scraped metrics"
    python3 "$repo/docker/check-queries.py" "http://127.0.0.1:$prometheus_port" \
        "$repo/docker/grafana/dashboards/kafka-mirror-proxy.json" || fail "dashboard queries"
fi

step "SIGTERM: podman stop"
start=$(date +%s.%N)
"${podman[@]}" stop --time 60 "$name" > /dev/null
took=$(echo "$(date +%s.%N) - $start" | bc)
code=$("${podman[@]}" inspect -f '{{.State.ExitCode}}' "$name")
"${podman[@]}" logs "$name" > "$work/proxy.log" 2>&1
[ "$code" = 0 ] || { tail -20 "$work/proxy.log" >&2; fail "the proxy exited with $code on SIGTERM"; }
printf '   exit code 0 after %.1f s\n' "$took"
echo "PASS: $image"
