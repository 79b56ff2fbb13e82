#!/usr/bin/env python3
"""What a write into a written-but-uncached file costs, and what avoids it.

bench-results/format-v2.md, "The cold recycled file": a loop of pwrite + fdatasync at increasing offsets
into a 16 MiB file written and synced beforehand, its pages dropped from the cache (except
"warm"); modes alternate, 5 runs each, medians of appends/s. "willneed" asks the kernel to
read 1 MiB ahead (posix_fadvise), "pad" extends each write with zeros to the end of its
4 KiB block (what the writer does in a recycled file, src/log/writer/block_fill.rs).

    python3 scripts/cold-write-probe.py [BATCH_BYTES [WRITES]]   (default 1900 1200)

It writes $PROBE_FILE (default: target/cold-write-probe.bin in the repository, on the
disk of the sources; never a tmpfs, where fdatasync costs nothing) and deletes it after.
"""
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.environ.get("PROBE_FILE", os.path.join(REPO, "target", "cold-write-probe.bin"))
FILE_BYTES = 16 << 20
BLOCK_BYTES = 4096
READ_AHEAD_MIN_BYTES, READ_AHEAD_MAX_BYTES = 512 << 10, 1 << 20
MODES = ["cold", "willneed", "pad", "warm"]


def prepare(warm):
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    fd = os.open(PATH, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.pwrite(fd, b"\x5a" * FILE_BYTES, 0)
    os.fsync(fd)
    if not warm:
        os.posix_fadvise(fd, 0, FILE_BYTES, os.POSIX_FADV_DONTNEED)
    return fd


def run(mode, batch_bytes, writes):
    fd = prepare(mode == "warm")
    data = b"r" * batch_bytes
    pos, asked_end = BLOCK_BYTES, BLOCK_BYTES
    started = time.perf_counter()
    for _ in range(writes):
        if mode == "willneed" and pos + READ_AHEAD_MIN_BYTES > asked_end:
            start = max(asked_end, pos) // BLOCK_BYTES * BLOCK_BYTES
            asked_end = pos + READ_AHEAD_MAX_BYTES
            os.posix_fadvise(fd, start, asked_end - start, os.POSIX_FADV_WILLNEED)
        if mode == "pad":
            end = pos + batch_bytes
            fill = -end % BLOCK_BYTES
            os.pwrite(fd, data + bytes(fill), pos)
        else:
            os.pwrite(fd, data, pos)
        os.fdatasync(fd)
        pos += batch_bytes
    elapsed = time.perf_counter() - started
    os.close(fd)
    return writes / elapsed


def main():
    batch_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 1900
    writes = int(sys.argv[2]) if len(sys.argv) > 2 else 1200
    assert BLOCK_BYTES + batch_bytes * writes < FILE_BYTES, "the writes fit the file"
    rates = {m: [] for m in MODES}
    for r in range(5):
        for m in MODES[r % 4 :] + MODES[: r % 4]:
            rates[m].append(run(m, batch_bytes, writes))
    cold = statistics.median(rates["cold"])
    for m, v in rates.items():
        med = statistics.median(v)
        print(f"{m:9} median {med:8.0f}/s ({med / cold:.2f}x cold)  runs {[round(x) for x in v]}")
    os.unlink(PATH)


if __name__ == "__main__":
    main()
