#!/usr/bin/env python3
"""Produces records with librdkafka (confluent-kafka) and reports each delivery as one JSON line.

For kafka-mirror-proxy's tests (tests/kafka_it/proxy.rs): how librdkafka's producer sees the
proxy, including a write refused by the write policy.

    produce.py --bootstrap HOST:PORT --topic T [--count N] [--partition P] [--idempotent]
               [--transactional-id ID] [--timeout-ms N] [--prop KEY=VALUE ...]

Prints per record {"partition":P,"offset":O} or {"error":NAME,"code":N,"message":TEXT,
"fatal":BOOL,"retriable":BOOL,"elapsed_ms":MS}, then {"done":true,"elapsed_ms":MS}. Exit 0 even
when deliveries failed (the test reads the lines); 1 on a client error outside deliveries (a
transaction that cannot start, a flush that times out).
"""

import argparse
import json
import sys
import time

from confluent_kafka import KafkaException, Producer


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--partition", type=int)
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--transactional-id")
    p.add_argument("--timeout-ms", type=int, default=30000)
    p.add_argument("--prop", action="append", default=[])
    args = p.parse_args()

    conf = {
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": args.idempotent or bool(args.transactional_id),
        "message.timeout.ms": args.timeout_ms,
        "linger.ms": 5,
    }
    if args.transactional_id:
        conf["transactional.id"] = args.transactional_id
    for kv in args.prop:
        k, _, v = kv.partition("=")
        conf[k] = v
    producer = Producer(conf)
    start = time.monotonic()
    out = []

    def report(err, msg):
        elapsed = int((time.monotonic() - start) * 1000)
        if err is None:
            out.append({"partition": msg.partition(), "offset": msg.offset()})
        else:
            out.append({
                "error": err.name(), "code": err.code(), "message": err.str(),
                "fatal": err.fatal(), "retriable": err.retriable(), "elapsed_ms": elapsed,
            })

    try:
        if args.transactional_id:
            producer.init_transactions(args.timeout_ms / 1000)
            producer.begin_transaction()
        for i in range(args.count):
            kwargs = {"key": f"key-{i}".encode(), "value": f"value-{i}".encode(), "on_delivery": report}
            if args.partition is not None:
                kwargs["partition"] = args.partition
            producer.produce(args.topic, **kwargs)
        if args.transactional_id:
            producer.commit_transaction(args.timeout_ms / 1000)
        remaining = producer.flush(args.timeout_ms / 1000)
        if remaining:
            print(f"{remaining} records not delivered in time", file=sys.stderr)
            return 1
    except KafkaException as e:
        err = e.args[0]
        out.append({
            "error": err.name(), "code": err.code(), "message": err.str(), "fatal": err.fatal(),
            "retriable": err.retriable(), "elapsed_ms": int((time.monotonic() - start) * 1000),
        })
    for line in out:
        print(json.dumps(line))
    print(json.dumps({"done": True, "elapsed_ms": int((time.monotonic() - start) * 1000)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
