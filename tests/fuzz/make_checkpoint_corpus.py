#!/usr/bin/env python3
"""Writes the in-tree seed corpus of the checkpoint fuzzer (tests/fuzz/corpus/checkpoint/).

Small but structurally complete checkpoints (docs/wire-format.md, "Checkpoint files"),
each under 1 KiB so that scripts/fuzz.sh's -max_len=4096 leaves room to grow them: the
array layouts of a worker (parameters, momentum, error-feedback residuals, an int64 RNG
state), of a parameter server, of a run with no arrays and with empty arrays. Each file
is written with the fuzz input's flag byte in front (checkpoint_fuzz.cc): 0 (as is),
1 (length and CRC fixed up after mutation), 3 (and subset mode), 6 (subset, every other
array expected), 8 (one element too many expected), 16 (the wrong type expected).

  usage: python3 tests/fuzz/make_checkpoint_corpus.py [DIR]
"""
import os
import random
import struct
import sys
import zlib


def checkpoint(step, epoch, seed, rank, world, arrays):
    body = struct.pack("<QQQIII", step, epoch, seed, rank, world, len(arrays))
    for name, kind, values in arrays:
        raw = name.encode()
        body += struct.pack("<I", len(raw)) + raw
        if kind == "f32":
            body += struct.pack("<BQ", 1, len(values)) + struct.pack(f"<{len(values)}f", *values)
        else:
            body += struct.pack("<BQ", 2, len(values)) + struct.pack(f"<{len(values)}q", *values)
    header = b"GRADCKPT" + struct.pack("<IIQ", 1, zlib.crc32(body) & 0xFFFFFFFF, len(body))
    return header + body


def floats(rng, n):
    return [rng.uniform(-1, 1) for _ in range(n)]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "checkpoint")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(15)
    files = {
        "worker-ef-topk": checkpoint(64, 2, 7, 0, 2, [
            ("param/fc1.weight", "f32", floats(rng, 24)),
            ("param/fc1.bias", "f32", floats(rng, 4)),
            ("param/fc2.weight", "f32", floats(rng, 12)),
            ("param/fc2.bias", "f32", floats(rng, 3)),
            ("momentum/fc1.weight", "f32", floats(rng, 24)),
            ("momentum/fc1.bias", "f32", floats(rng, 4)),
            ("memory/bucket0.residual", "f32", floats(rng, 16)),
            ("rng/state", "i64", [0x123456789, -5, 2**62]),
        ]),
        "worker-powersgd": checkpoint(32, 1, 7, 1, 2, [
            ("param/fc1.weight", "f32", floats(rng, 16)),
            ("reducer/q0", "f32", floats(rng, 8)),
            ("reducer/error0", "f32", floats(rng, 16)),
            ("counters", "i64", [32, 1, 0, 7]),
        ]),
        "server": checkpoint(96, 3, 7, 2, 3, [
            ("server/params", "f32", floats(rng, 40)),
            ("server/momentum", "f32", floats(rng, 40)),
            ("server/versions", "i64", [96, 95]),
        ]),
        "empty-arrays": checkpoint(0, 0, 1, 0, 1, [
            ("a", "f32", []),
            ("b", "i64", []),
            ("", "f32", [1.0]),
        ]),
        "no-arrays": checkpoint(5, 0, 2**64 - 1, 3, 4, []),
    }
    for name, data in files.items():
        for flags in (0, 1, 3, 6, 8, 16):
            with open(os.path.join(out, f"{name}-flags{flags:02d}"), "wb") as f:
                f.write(bytes([flags]) + data)


if __name__ == "__main__":
    main()
