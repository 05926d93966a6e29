"""A librdkafka consumer-group member for tests: joins GROUP on TOPIC through BOOTSTRAP and stays a
member until its standard input closes.

Prints one JSON line {"joined": [partitions]} once partitions are assigned, then, for each partition,
{"partition": P, "first_offset": O} for the first record it receives (it starts at the group's
committed offsets), and commits nothing. `--protocol consumer` joins with the KIP-848 protocol.
"""

import argparse
import json
import sys
import threading

from confluent_kafka import Consumer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--protocol", default="classic", choices=["classic", "consumer"])
    args = parser.parse_args()

    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "group.protocol": args.protocol,
    }
    if args.protocol == "classic":
        config["session.timeout.ms"] = 6000
    consumer = Consumer(config)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()

    def emit(obj) -> None:
        print(json.dumps(obj), flush=True)

    joined = False

    def on_assign(c, partitions) -> None:
        nonlocal joined
        if partitions and not joined:
            joined = True
            emit({"joined": sorted(p.partition for p in partitions)})

    consumer.subscribe([args.topic], on_assign=on_assign)
    seen = set()
    while not done.is_set():
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        if msg.partition() not in seen:
            seen.add(msg.partition())
            emit({"partition": msg.partition(), "first_offset": msg.offset()})
    consumer.close()


if __name__ == "__main__":
    main()
