#!/usr/bin/env python3
"""Byte-flip sweep over checksummed traces.

Each trace of testdata/ named below is compressed the way a recorder writes
it with checksums (zstd frames with a content checksum: `zstd --check`), and
flips of every byte (one bit, a different one from byte to byte, and all 8
bits) are fed to
`commdebug analyze --noise 3`.  No flip may give exit status 0 with a report
that differs from the intact trace's; none may crash or hang.

usage: flip_sweep.py COMMDEBUG TESTDATA_DIR
"""
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

TRACES = ["two-regions.jsonl", "mlp-tp.jsonl"]


def analyze(cd, path):
    p = subprocess.run([cd, "analyze", "--noise", "3", "--no-nccl", path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return p.returncode, p.stdout, p.stderr


def main():
    cd, data = sys.argv[1], sys.argv[2]
    if not shutil.which("zstd"):
        print("zstd not found: skipped")
        return 77
    bad = 0
    tally = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in TRACES:
            z = subprocess.run(["zstd", "-q", "--check", "-c", os.path.join(data, name)],
                               stdout=subprocess.PIPE, check=True).stdout
            # the frame header descriptor's checksum bit is set
            assert z[:4] == b"\x28\xb5\x2f\xfd" and z[4] & 0x04, "zstd wrote no checksum"
            path = os.path.join(tmp, "t.zst")
            with open(path, "wb") as f:
                f.write(z)
            rc0, out0, _ = analyze(cd, path)
            if rc0 != 0 or not out0:
                print(f"{name}: the intact trace gives exit {rc0}")
                return 1
            def one(job):
                pos, mask = job
                b = bytearray(z)
                b[pos] ^= mask
                p = os.path.join(tmp, f"f{pos}-{mask}.zst")
                with open(p, "wb") as f:
                    f.write(b)
                r = analyze(cd, p)
                os.unlink(p)
                return pos, mask, r
            jobs = [(pos, mask) for pos in range(len(z)) for mask in (1 << pos % 8, 0xFF)]
            with concurrent.futures.ThreadPoolExecutor(min(8, max(2, os.cpu_count() or 2))) as ex:
                for pos, mask, (rc, out, err) in ex.map(one, jobs):
                    same = out == out0
                    key = (rc, same if rc == 0 else None)
                    tally[key] = tally.get(key, 0) + 1
                    why = None
                    if rc < 0 or rc not in (0, 1, 3):
                        why = f"exit {rc}"
                    elif rc == 0 and not same:
                        why = "exit 0 with a changed report"
                    elif rc == 1 and len(err.decode(errors="replace").splitlines()) != 1:
                        why = "an error of more than one line"
                    if why:
                        bad += 1
                        if bad <= 10:
                            print(f"{name}: byte {pos} ^ {mask:#04x}: {why}")
                            sys.stdout.write(err.decode(errors="replace"))
    for (rc, same), n in sorted(tally.items(), key=lambda kv: str(kv[0])):
        what = f"exit {rc}" + ("" if same is None else
                               " with the same report" if same else " with a changed report")
        print(f"{n:6d} flips: {what}")
    print(f"{bad} bad flips")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
