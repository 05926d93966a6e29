#!/usr/bin/env python3
"""Counts the record batches in a Kafka log directory, from the segment files' batch headers only
(no decompression): for each topic given, batches, records, bytes on disk, and records per batch.

usage: logscan.py LOG_DIR TOPIC...   -> JSON on stdout
"""
import glob
import json
import os
import struct
import sys


def scan_segment(path):
    batches = records = size = 0
    with open(path, "rb") as f:
        while True:
            header = f.read(27)
            if len(header) < 27:
                break
            # baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32,
            # attributes i16, lastOffsetDelta i32
            _, length = struct.unpack(">qi", header[:12])
            (last_delta,) = struct.unpack(">i", header[23:27])
            batches += 1
            records += last_delta + 1
            size += length + 12
            f.seek(length + 12 - 27, os.SEEK_CUR)
    return batches, records, size


def main():
    log_dir = sys.argv[1]
    out = {}
    for topic in sys.argv[2:]:
        b = r = s = 0
        for seg in glob.glob(os.path.join(log_dir, f"{topic}-*", "*.log")):
            if not os.path.basename(os.path.dirname(seg))[len(topic) + 1:].isdigit():
                continue
            x, y, z = scan_segment(seg)
            b, r, s = b + x, r + y, s + z
        out[topic] = {"batches": b, "records": r, "bytes": s,
                      "records_per_batch": r / b if b else None, "bytes_per_batch": s / b if b else None}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
