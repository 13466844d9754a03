"""A hostile campaign against attnc's disk kernel cache: every state of the cache directory that
once failed a compile, one scenario each, each in a fresh directory.

    hostile_cache_campaign.py --attnc build/tools/attnc [--keep DIR]

Scenarios: a full disk (writes beyond a file-size limit fail with EFBIG, SIGXFSZ ignored; and
ENOSPC on a 16 KiB tmpfs where this process may mount one), no cache directory (HOME unset)
or one under a regular file, a directory, socket or FIFO at an entry's path or the lock's
path, a symbolic link as the lock, an entry or the directory with mode 000, another user's
unreadable entry and lock, a lock held past ATTNJIT_LOCK_TIMEOUT_S, a corrupt entry, the
readonly mode over an unreadable directory; `attnc cache list` and `attnc cache clear` over
entries they cannot read or remove; compile output to /dev/full.

Checks: no crash (no signal), the expected exit status (0 for every compile: the cache never
fails one; 4 for an environment failure of list, clear or the output), the expected cache
level, at most one cache warning per process, and every warning or error line naming the path
(quoted), the reason (in parentheses) and, for warnings, ATTNJIT_DISK_CACHE. Permission cases
run attnc as user nobody when this runs as root (root ignores mode bits); without root, the
other-user case is skipped and says so. Prints one line per scenario; exits 1 on any failure.
"""

import argparse
import fcntl
import glob
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile

SPEC = "dtype=bf16 head_dim=64 mask=none"
NOBODY = 65534
WARNING = "attnjit: kernel cache: "


class Campaign:
    def __init__(self, attnc, root):
        self.attnc = attnc
        self.root = root
        self.failures = []
        self.count = 0
        self.is_root = os.geteuid() == 0

    # --- running attnc ---------------------------------------------------------------------

    def run(self, args, cache, as_nobody=False, env=None, limit_bytes=None, stdout=None):
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("ATTNJIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME",
                                    "ATTNJIT_DISK_CACHE", "ATTNJIT_LOCK_TIMEOUT_S")}
        if cache is not None:
            environment["ATTNJIT_CACHE_DIR"] = cache
        environment.update(env or {})

        def prepare():
            if limit_bytes is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
            if as_nobody and self.is_root:
                os.setgid(NOBODY)
                os.setuid(NOBODY)

        return subprocess.run([self.attnc] + args, env=environment, preexec_fn=prepare,
                              stdout=stdout if stdout is not None else subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=600)

    def compile(self, cache, **kwargs):
        return self.run(["compile", "--arch", "sm_80", "--json", "--spec", SPEC], cache, **kwargs)

    # --- checks ----------------------------------------------------------------------------

    def fail(self, scenario, why, result=None):
        detail = f" (exit {result.returncode}; stderr: {result.stderr.strip()!r})" if result else ""
        self.failures.append(f"{scenario}: {why}{detail}")

    def check(self, scenario, result, status, level=None, warnings=None, names=None):
        """The result of one attnc call: no signal, `status`, the cache `level` of a compile,
        `warnings` cache warnings, and `names` (paths) quoted in the warning or error lines."""
        self.count += 1
        ok = True
        if result.returncode < 0:
            self.fail(scenario, f"killed by signal {-result.returncode}", result)
            return False
        if result.returncode != status:
            self.fail(scenario, f"expected exit {status}", result)
            ok = False
        if level is not None and result.returncode == 0:
            lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
            got = json.loads(lines[0])["cache"] if lines else None
            if got != level:
                self.fail(scenario, f"expected cache level {level}, got {got}", result)
                ok = False
        lines = [line for line in result.stderr.splitlines() if line.startswith(WARNING)]
        if len(lines) > 1:
            self.fail(scenario, f"{len(lines)} cache warnings in one process", result)
            ok = False
        if warnings is not None and len(lines) != warnings:
            self.fail(scenario, f"expected {warnings} cache warnings, got {len(lines)}", result)
            ok = False
        for line in lines:
            if "(" not in line or "ATTNJIT_DISK_CACHE=" not in line:
                self.fail(scenario, f"warning without a reason or the way out: {line}")
                ok = False
        errors = [line for line in result.stderr.splitlines() if line.startswith("attnc: ")]
        for line in errors:
            if "(" not in line:
                self.fail(scenario, f"error without a reason: {line}")
                ok = False
        for name in names or []:
            if f"'{name}'" not in result.stderr:
                self.fail(scenario, f"no line names '{name}'", result)
                ok = False
        return ok

    def report(self, scenario, ok, note=""):
        print(f"{'ok  ' if ok else 'FAIL'} {scenario}{': ' + note if note else ''}", flush=True)

    # --- scenarios -------------------------------------------------------------------------

    def fresh(self, name, owner_nobody=False):
        """A new cache directory `name` (and its entry and lock paths, once an entry exists)."""
        path = os.path.join(self.root, name)
        os.makedirs(path)
        if owner_nobody and self.is_root:
            os.chown(path, NOBODY, NOBODY)
        return path

    def seeded(self, name, owner_nobody=False):
        """A cache directory holding the spec's entry; returns (dir, entry, lock)."""
        path = self.fresh(name, owner_nobody)
        self.compile(path, as_nobody=owner_nobody)
        entries = glob.glob(os.path.join(path, "*.kernel"))
        if len(entries) != 1:
            raise RuntimeError(f"seeding {path} left {len(entries)} entries")
        entry = entries[0]
        return path, entry, entry[: -len(".kernel")] + ".lock"

    def unstored(self, scenario, result, reason, cache):
        """A compile that could not store its entry: a miss with one warning giving `reason`,
        and no temp file left in `cache`."""
        ok = self.check(scenario, result, 0, "miss", 1)
        ok &= reason in result.stderr
        leftovers = glob.glob(os.path.join(cache, "*.tmp.*"))
        if leftovers:
            self.fail(scenario, f"temp files left: {leftovers}")
            ok = False
        return ok

    def scenario_full_disk(self):
        cache = self.fresh("full-disk")
        ok = self.unstored("full disk", self.compile(cache, limit_bytes=4096),
                           "(File too large)", cache)
        ok &= self.check("full disk, then room", self.compile(cache), 0, "miss", 0)
        ok &= self.check("full disk, then a hit", self.compile(cache), 0, "disk", 0)
        self.report("full disk (EFBIG on the temp file)", ok)

    def scenario_enospc(self):
        """A real full disk: a 16 KiB tmpfs (root only, where mounts are allowed)."""
        cache = self.fresh("enospc")
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", cache],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            self.report("full disk (ENOSPC on a small tmpfs)", True,
                        f"SKIPPED: cannot mount a tmpfs here ({mounted.stderr.strip()})")
            return
        try:
            ok = self.unstored("ENOSPC", self.compile(cache), "(No space left on device)", cache)
        finally:
            subprocess.run(["umount", cache], check=False)
        self.report("full disk (ENOSPC on a small tmpfs)", ok)

    def scenario_no_directory(self):
        result = self.run(["compile", "--arch", "sm_80", "--json", "--spec", SPEC], None)
        ok = self.check("HOME unset", result, 0, "miss", 1)
        ok &= "HOME are all unset" in result.stderr
        self.report("no cache directory (HOME unset)", ok)
        file = os.path.join(self.root, "a-file")
        with open(file, "w") as handle:
            handle.write("x")
        under = os.path.join(file, "cache")
        ok = self.check("under a file", self.compile(under), 0, "miss", 1, [under])
        self.report("cache directory under a regular file", ok)

    def scenario_entry_path(self):
        for kind in ("directory", "socket", "fifo"):
            cache, entry, _ = self.seeded(f"entry-{kind}")
            os.remove(entry)
            if kind == "directory":
                os.mkdir(entry)
                with open(os.path.join(entry, "inside"), "w") as handle:
                    handle.write("x")
                ok = self.check(f"{kind} at entry", self.compile(cache), 0, "miss", 1, [entry])
                ok &= self.check(f"{kind} at entry again", self.compile(cache), 0, "miss", 1)
                self.report("a non-empty directory at the entry's path", ok, "left, compiled")
                continue
            if kind == "socket":
                server = socket.socket(socket.AF_UNIX)
                server.bind(entry)
                server.close()
            else:
                os.mkfifo(entry)
            ok = self.check(f"{kind} at entry", self.compile(cache), 0, "miss", 0)
            ok &= self.check(f"{kind} at entry, repaired", self.compile(cache), 0, "disk", 0)
            self.report(f"a {kind} at the entry's path", ok, "replaced")

    def scenario_lock_path(self):
        for kind in ("directory", "socket", "fifo", "symlink"):
            cache, entry, lock = self.seeded(f"lock-{kind}")
            os.remove(entry)
            if os.path.lexists(lock):
                os.remove(lock)
            if kind == "directory":
                os.mkdir(lock)
            elif kind == "socket":
                server = socket.socket(socket.AF_UNIX)
                server.bind(lock)
                server.close()
            elif kind == "fifo":
                os.mkfifo(lock)
            else:
                os.symlink(os.path.join(self.root, "lock-target"), lock)
            ok = self.check(f"{kind} at lock", self.compile(cache), 0, "miss", 1, [lock])
            ok &= self.check(f"{kind} at lock, stored", self.compile(cache), 0, "disk", 1)
            ok &= not os.path.exists(os.path.join(self.root, "lock-target"))
            self.report(f"a {kind} at the lock's path", ok, "compiled and stored without it")

    def scenario_permissions(self):
        who = "as nobody" if self.is_root else f"as uid {os.geteuid()}"
        cache, entry, _ = self.seeded("entry-000", owner_nobody=True)
        os.chmod(entry, 0)
        ok = self.check("entry 000", self.compile(cache, as_nobody=True), 0, "miss", 1, [entry])
        ok &= self.check("entry 000, replaced", self.compile(cache, as_nobody=True), 0, "disk", 0)
        self.report(f"an entry of mode 000 ({who})", ok, "replaced")

        cache, _, _ = self.seeded("dir-000", owner_nobody=True)
        os.chmod(cache, 0)
        ok = self.check("dir 000", self.compile(cache, as_nobody=True), 0, "miss", 1, [cache])
        result = self.compile(cache, as_nobody=True, env={"ATTNJIT_DISK_CACHE": "readonly"})
        ok &= self.check("dir 000 readonly", result, 0, "miss", 1)
        ok &= f"'{cache}/" in result.stderr and "(Permission denied)" in result.stderr
        ok &= "readonly to only read it" not in result.stderr
        listing = self.run(["cache", "list"], cache, as_nobody=True)
        ok &= self.check("dir 000 list", listing, 4, names=[cache])
        os.chmod(cache, 0o755)
        self.report(f"a cache directory of mode 000 ({who})", ok, "compiled in memory; list exit 4")

        cache, entry, _ = self.seeded("list-000", owner_nobody=True)
        os.chmod(entry, 0)
        listing = self.run(["cache", "list"], cache, as_nobody=True)
        ok = self.check("list 000", listing, 4, names=[entry])
        ok &= "<unreadable>" in listing.stdout
        self.report(f"cache list over an unreadable entry ({who})", ok, "reported, exit 4")

        if not self.is_root:
            self.report("another user's unreadable entry and lock", True,
                        "SKIPPED: needs root to create another user's files")
            return
        cache, entry, lock = self.seeded("other-user")
        os.chmod(entry, 0o600)
        os.chmod(lock, 0o600)
        os.chmod(cache, 0o1777)
        ok = self.check("other user's", self.compile(cache, as_nobody=True), 0, "miss", 1,
                        [lock])
        ok &= os.stat(entry).st_uid == 0
        clear = self.run(["cache", "clear"], cache, as_nobody=True)
        ok &= self.check("other user's clear", clear, 4, names=[entry])
        self.report("another user's unreadable entry and lock (sticky directory)", ok,
                    "compiled, left in place; clear exit 4")

    def scenario_lock_held(self):
        cache, _, lock = self.seeded("held")
        with open(lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            result = self.compile(cache, env={"ATTNJIT_LOCK_TIMEOUT_S": "1"})
        ok = self.check("lock held", result, 0, "disk", 1, [lock])
        self.report("a lock held past ATTNJIT_LOCK_TIMEOUT_S", ok, "compiled without it")

    def scenario_corrupt(self):
        cache, entry, _ = self.seeded("corrupt")
        with open(entry, "r+b") as handle:
            handle.seek(os.path.getsize(entry) // 2)
            byte = handle.read(1)
            handle.seek(-1, os.SEEK_CUR)
            handle.write(bytes([byte[0] ^ 0xFF]))
        result = self.compile(cache)
        ok = self.check("corrupt", result, 0, "miss", 0)
        ok &= "checksum mismatch" in result.stderr
        ok &= self.check("corrupt, replaced", self.compile(cache), 0, "disk", 0)
        self.report("a corrupt entry", ok, "replaced")

    def scenario_clear(self):
        cache, entry, lock = self.seeded("clear")
        blocked = os.path.join(cache, "0" * 32 + ".kernel")
        os.mkdir(blocked)
        with open(os.path.join(blocked, "inside"), "w") as handle:
            handle.write("x")
        os.remove(lock)
        os.mkfifo(lock)
        result = self.run(["cache", "clear"], cache)
        ok = self.check("clear", result, 4, names=[blocked])
        ok &= "removed 1 entry" in result.stdout
        ok &= not os.path.exists(entry) and not os.path.lexists(lock)
        self.report("cache clear past a directory in the way", ok, "others removed, exit 4")

    def scenario_output(self):
        cache = self.fresh("output")
        with open("/dev/full", "w") as full:
            result = self.compile(cache, stdout=full)
        ok = self.check("stdout full", result, 4)
        ok &= "standard output (No space left on device)" in result.stderr
        self.report("compile --json to /dev/full", ok, "exit 4")

    def run_all(self):
        for scenario in (self.scenario_full_disk, self.scenario_enospc, self.scenario_no_directory,
                         self.scenario_entry_path, self.scenario_lock_path,
                         self.scenario_permissions, self.scenario_lock_held,
                         self.scenario_corrupt, self.scenario_clear, self.scenario_output):
            try:
                scenario()
            except Exception as error:  # a broken scenario is a failure, the others still run
                self.failures.append(f"{scenario.__name__}: {type(error).__name__}: {error}")
                self.report(scenario.__name__, False, str(error))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attnc", required=True)
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="attnjit-hostile-cache-")
    os.makedirs(root, exist_ok=True)
    os.chmod(root, 0o755)
    try:
        campaign = Campaign(os.path.abspath(args.attnc), root)
        campaign.run_all()
    finally:
        if not args.keep:
            for path, dirs, _ in os.walk(root):
                for name in dirs:
                    os.chmod(os.path.join(path, name), 0o755)
            shutil.rmtree(root, ignore_errors=True)
    print(f"{campaign.count} attnc calls, {len(campaign.failures)} failures")
    for failure in campaign.failures:
        print(f"  {failure}")
    return 1 if campaign.failures else 0


if __name__ == "__main__":
    sys.exit(main())
