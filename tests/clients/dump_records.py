#!/usr/bin/env python3
"""Reads a topic with librdkafka (confluent-kafka) and prints its records as JSON lines.

An independent second reader for kafka-mirror-proxy's tests: it prints exactly the record format of
`TestClient consume` (tests/java/TestClient.java), so a test can compare what the Java client and
librdkafka see with plain equality.

    dump_records.py --bootstrap HOST:PORT --topic T [--isolation read_committed|read_uncommitted]
                    [--partition P] [--timeout-ms N] [--prop KEY=VALUE ...]

Assigns all partitions of T (or only P) without a consumer group, reads the end offsets once at start
(the last stable offsets under read_committed), reads every partition from its beginning up to them,
and exits 0. One line per record:

    {"partition":P,"offset":O,"key":B64|null,"value":B64|null,"headers":[["k",B64|null],...],
     "timestamp":MS,"timestampType":"CreateTime"|"LogAppendTime"}

Bytes are standard base64; null stays distinct from empty. librdkafka's timestamp types
(TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME) are printed with the Java names. On error or timeout it
prints a message to stderr and exits 1 (2 for bad usage).
"""

import argparse
import base64
import json
import sys
import time
import traceback

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    IsolationLevel,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

TIMESTAMP_TYPES = {
    TIMESTAMP_CREATE_TIME: "CreateTime",
    TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime",
}


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--isolation", choices=["read_committed", "read_uncommitted"], default="read_uncommitted")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--timeout-ms", type=int, default=30000)
    parser.add_argument("--prop", action="append", default=[], help="extra librdkafka config KEY=VALUE")
    return parser.parse_args()


def props(args):
    extra = {}
    for kv in args.prop:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            sys.exit(f"--prop takes KEY=VALUE, got {kv!r}")
        extra[key] = value
    return extra


def end_offsets(args, partitions, deadline):
    """Offsets to read up to: high watermarks, or last stable offsets under read_committed."""
    admin = AdminClient({"bootstrap.servers": args.bootstrap, **props(args)})
    isolation = (
        IsolationLevel.READ_COMMITTED if args.isolation == "read_committed" else IsolationLevel.READ_UNCOMMITTED
    )
    request = {TopicPartition(args.topic, p): OffsetSpec.latest() for p in partitions}
    futures = admin.list_offsets(
        request, isolation_level=isolation, request_timeout=max(1.0, deadline - time.monotonic())
    )
    return {tp.partition: future.result().offset for tp, future in futures.items()}


def main():
    args = parse_args()
    deadline = time.monotonic() + args.timeout_ms / 1000.0
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            # confluent-kafka insists on a group.id, but with assign() and no commits the group is never
            # joined and no offsets are stored.
            "group.id": "kafka-harness-dump-records",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "isolation.level": args.isolation,
            "auto.offset.reset": "earliest",
            # Empty partitions otherwise hold each fetch for the default 500 ms.
            "fetch.wait.max.ms": 100,
            "client.id": "dump-records",
            **props(args),
        }
    )
    try:
        if args.partition is not None:
            partitions = [args.partition]
        else:
            metadata = consumer.list_topics(args.topic, timeout=max(1.0, deadline - time.monotonic()))
            topic = metadata.topics.get(args.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise RuntimeError(f"topic {args.topic} not found: {topic.error if topic else 'no metadata'}")
            partitions = sorted(topic.partitions)
        end = end_offsets(args, partitions, deadline)
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
        # A partition is done once a record at end-1 or beyond, or an end-of-partition event at or past
        # end, has been seen. Empty ranges are found done by their first EOF event (offset 0 >= end 0),
        # or right away when end is 0.
        remaining = {p for p in partitions if end[p] > 0}
        out = sys.stdout
        while remaining:
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out before reaching end offsets {end}; partitions left {sorted(remaining)}")
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            p = msg.partition()
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= end.get(p, 0):
                        remaining.discard(p)
                    continue
                raise RuntimeError(f"consume error on partition {p}: {msg.error()}")
            offset = msg.offset()
            if offset < end[p]:
                ts_type, ts = msg.timestamp()
                record = {
                    "partition": p,
                    "offset": offset,
                    "key": b64(msg.key()),
                    "value": b64(msg.value()),
                    "headers": [[k, b64(v)] for k, v in (msg.headers() or [])],
                    "timestamp": ts,
                    "timestampType": TIMESTAMP_TYPES.get(ts_type, "NoTimestampType"),
                }
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
            if offset >= end[p] - 1:
                remaining.discard(p)
        out.flush()
    finally:
        consumer.close()


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # noqa: BLE001 - one line for the harness, then the traceback
        print(f"error: {error}", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
