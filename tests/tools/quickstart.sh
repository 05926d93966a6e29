#!/usr/bin/env bash
# Quickstart: a local source and destination Kafka cluster, kafka-mirror-proxy in front of the
# destination, a mirror of a demo topic under live traffic, and `kafka-mirrors --describe` every few
# seconds (lag reaches 0 and stays there). Ctrl-C stops everything this script started.
#
#   bash tests/tools/quickstart.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
work=$(mktemp -d -t kmp-quickstart.XXXXXX)
pids=()
cleanup() {
  trap - EXIT INT TERM
  echo; echo "quickstart: stopping"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

echo "quickstart: building (cargo build)"
cargo build --quiet --bins -p kafka-mirror-proxy -p kafka-harness
bin=target/debug

up() { # variable, name, extra args...; sets the variable to the cluster's bootstrap
  # Runs in this shell, not in a $(...) subshell, so that the cluster's pid reaches `pids` and
  # cleanup stops it however the script ends (Ctrl-C, kill, an error).
  local var=$1 name=$2; shift 2
  "$bin/kafka-harness" up --name "$name" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  for _ in $(seq 1 180); do
    if grep -q '^bootstrap=' "$work/$name.out" 2>/dev/null; then
      printf -v "$var" '%s' "$(sed -n 's/^bootstrap=//p' "$work/$name.out" | head -1)"
      return
    fi
    sleep 1
  done
  echo "quickstart: cluster $name did not start: $(tail -5 "$work/$name.err")" >&2
  exit 1
}
echo "quickstart: starting the source and destination clusters (Kafka from Maven Central, cached)"
up source_bootstrap source
up dest_bootstrap destination --prop transaction.partition.verification.enable=false
echo "quickstart: source $source_bootstrap, destination $dest_bootstrap"

libs="target/kafka/${KAFKA_VERSION:-4.4.0}/libs/*"
java -cp "$libs" org.apache.kafka.tools.TopicCommand --bootstrap-server "$source_bootstrap" \
  --create --topic demo.orders --partitions 3 --replication-factor 1 >/dev/null
echo "quickstart: producing 200 records/s to demo.orders on the source"
java -cp "$libs" org.apache.kafka.tools.ProducerPerformance --topic demo.orders --num-records 100000000 \
  --record-size 200 --throughput 200 --producer-props bootstrap.servers="$source_bootstrap" \
  compression.type=lz4 >"$work/producer.out" 2>&1 &
pids+=($!)

proxy_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/proxy.yaml" <<YAML
proxy:
  listen: "127.0.0.1:$proxy_port"
  advertised_host: "127.0.0.1"
  broker_port_base: 0
destination:
  bootstrap_servers: "$dest_bootstrap"
YAML
"$bin/kafka-mirror-proxy" --config "$work/proxy.yaml" 2>"$work/proxy.log" &
pids+=($!)
proxy="127.0.0.1:$proxy_port"
echo "quickstart: kafka-mirror-proxy on $proxy (log: $work/proxy.log)"

echo "bootstrap.servers=$source_bootstrap" >"$work/mirror.properties"
for _ in $(seq 1 60); do
  if "$bin/kafka-mirrors" --bootstrap-server "$proxy" --create --mirror demo --mirror-config "$work/mirror.properties" 2>"$work/cli.err"; then
    break
  fi
  sleep 1
done
"$bin/kafka-mirrors" --bootstrap-server "$proxy" --add --mirror demo --topic 'demo\..*'
echo "quickstart: clients and tools use $proxy; demo.orders is read-only there until --remove. Ctrl-C stops."
while true; do
  sleep 3
  echo
  "$bin/kafka-mirrors" --bootstrap-server "$proxy" --describe --mirror demo || true
done
