#!/usr/bin/env python3
"""Writes the record payloads of the replicator benchmark: COUNT lines of exactly SIZE bytes each.

ProducerPerformance (--payload-file) sends a randomly chosen line per record. The lines are JSON-like
events (repeated field names, a small vocabulary, random ids and numbers), so lz4 batches compress
about as much as typical event data does, unlike --record-size payloads (random letters: lz4 barely
compresses them). Deterministic: the same arguments give the same file.

usage: payloads.py OUT [SIZE=1024] [COUNT=20000]
"""
import random
import sys

WORDS = (
    "checkout payment refund login logout search view click cart order shipment invoice account "
    "profile settings report export import sync retry timeout error warning info debug trace user "
    "admin guest session token cache miss hit region zone node cluster shard replica leader follower "
    "alpha beta gamma delta red green blue mobile desktop tablet android ios web api batch stream"
).split()


def line(rng: random.Random, size: int) -> str:
    fields = [
        f'"ts":{1760000000000 + rng.randrange(10**9)}',
        f'"event":"{rng.choice(WORDS)}.{rng.choice(WORDS)}"',
        f'"user_id":"{rng.getrandbits(64):016x}"',
        f'"session":"{rng.getrandbits(128):032x}"',
        f'"region":"{rng.choice(["eu-west-1", "us-east-1", "us-west-2", "ap-south-1"])}"',
        f'"amount":{rng.randrange(100000) / 100:.2f}',
        f'"status":{rng.choice([200, 200, 200, 201, 204, 400, 404, 500])}',
        f'"latency_ms":{rng.randrange(2000)}',
        f'"tags":["{rng.choice(WORDS)}","{rng.choice(WORDS)}","{rng.choice(WORDS)}"]',
    ]
    text = "{" + ",".join(fields) + ',"message":"'
    while len(text) < size - 2:
        text += rng.choice(WORDS) + " "
    text = text[: size - 2] + '"}'
    assert len(text) == size
    return text


def main() -> None:
    out = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
    rng = random.Random(42)
    with open(out, "w", encoding="ascii") as f:
        for _ in range(count):
            f.write(line(rng, size) + "\n")


if __name__ == "__main__":
    main()
