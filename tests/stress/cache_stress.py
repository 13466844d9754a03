"""Stress test of the disk kernel cache: processes compiling, loading, listing and clearing
one cache directory at once, for a bounded time.

    cache_stress.py --attnc PATH [--library PATH] [--seconds 40] [--compilers 4]

Workers, all on one fresh ATTNJIT_CACHE_DIR, until the deadline:
  - `--compilers` loops of `attnc compile` over a few sm_80 specs (NVRTC needs no GPU);
  - with --library, one process whose threads compile through the Python binding (the C ABI),
    forgetting the memory cache between compiles so that every compile reaches the disk;
  - one loop of `attnc cache clear` and one of `attnc cache list`.
Every command must succeed (each compile reports a miss or a disk hit of the right spec), and
afterwards the directory must hold no temp file. Prints a summary; exits 1 on any failure.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

SPECS = [
    "dtype=bf16 head_dim=64 mask=none target=sm_80",
    "dtype=bf16 head_dim=64 mask=causal target=sm_80",
    "dtype=fp16 head_dim=64 mask=none target=sm_80",
]

LIBRARY_WORKER = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import attnjit
deadline = time.monotonic() + float(sys.argv[2])
specs = sys.argv[3:]
failures = []
counts = {"miss": 0, "disk": 0, "memory": 0}
lock = threading.Lock()

def work(offset):
    i = offset
    while time.monotonic() < deadline:
        spec = specs[i % len(specs)]
        i += 1
        try:
            attnjit.clear_cache(memory=True, disk=False)
            info = attnjit.Kernel.compile(spec).info()
            with lock:
                counts[info["cache"]] += 1
        except Exception as error:  # every compile must succeed
            with lock:
                failures.append(f"{spec}: {type(error).__name__}: {error}")

threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(f"library threads: {counts}")
for failure in failures:
    print(f"FAILED {failure}")
sys.exit(1 if failures else 0)
"""


class Results:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def fail(self, what):
        with self.lock:
            self.failures.append(what)


def run(command, env):
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def compiler(attnc, env, deadline, offset, results):
    i = offset
    while time.monotonic() < deadline:
        spec = SPECS[i % len(SPECS)]
        i += 1
        done = run([attnc, "compile", "--json", "--spec", spec], env)
        if done.returncode != 0:
            results.fail(f"compile {spec!r} exited {done.returncode}: {done.stderr.strip()}")
            continue
        info = json.loads(done.stdout)
        if info["cache"] not in ("miss", "disk") or "target=sm_80" not in info["spec"]:
            results.fail(f"compile {spec!r} reported {info['cache']} for {info['spec']}")
            continue
        results.count(f"compile {info['cache']}")


def looping(attnc, env, deadline, action, pause, results):
    while time.monotonic() < deadline:
        done = run([attnc, "cache", action], env)
        if done.returncode != 0:
            results.fail(f"cache {action} exited {done.returncode}: {done.stderr.strip()}")
        else:
            results.count(f"cache {action}")
        time.sleep(pause)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attnc", required=True)
    parser.add_argument("--library")
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--compilers", type=int, default=4)
    args = parser.parse_args()

    cache = tempfile.mkdtemp(prefix="attnjit-stress-")
    env = dict(os.environ, ATTNJIT_CACHE_DIR=cache)
    env.pop("ATTNJIT_DISK_CACHE", None)
    start = time.monotonic()
    deadline = start + args.seconds
    results = Results()
    workers = [threading.Thread(target=compiler, args=(args.attnc, env, deadline, n, results))
               for n in range(args.compilers)]
    workers.append(threading.Thread(target=looping,
                                    args=(args.attnc, env, deadline, "clear", 0.3, results)))
    workers.append(threading.Thread(target=looping,
                                    args=(args.attnc, env, deadline, "list", 0.5, results)))
    library = None
    if args.library:
        python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                  "tools", "python")
        library = subprocess.Popen(
            [sys.executable, "-c", LIBRARY_WORKER, python_dir, str(args.seconds)] + SPECS,
            env=dict(env, ATTNJIT_LIBRARY=args.library), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if library is not None:
        output, _ = library.communicate(timeout=600)
        print(output.strip())
        if library.returncode != 0:
            results.fail(f"library worker exited {library.returncode}")

    leftovers = sorted(os.path.basename(path) for path in glob.glob(os.path.join(cache, "*.tmp*")))
    if leftovers:
        results.fail(f"temp files left in the cache: {leftovers}")
    if not results.counts.get("compile miss") or not results.counts.get("cache clear"):
        results.fail(f"the workers did too little to test anything: {results.counts}")
    subprocess.run(["rm", "-rf", cache], check=False)
    elapsed = time.monotonic() - start
    print(f"cache_stress: {elapsed:.0f} s, {args.compilers} compiling processes"
          f"{' + 3 library threads' if args.library else ''}, clear and list loops: "
          f"{dict(sorted(results.counts.items()))}")
    for failure in results.failures:
        print(f"FAILED {failure}")
    return 1 if results.failures else 0


if __name__ == "__main__":
    sys.exit(main())
