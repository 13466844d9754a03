#!/usr/bin/env python3
"""Randomized forward checks on the GPU: problems drawn at random, each run by `attnc run
--check` against attnjit's fp32 reference kernel.

Each case draws a dtype, a head dim, a mask (none, causal, a sliding window of random sides,
FlashMask of the four layouts with random vectors or documents), the score modifiers (softcap,
ALiBi), a batch, query and key/value heads (MHA, GQA, MQA), the FlashMask heads, and lengths
Sq and Sk that are not tile multiples (equal or not, from 1 to --max-seqlen). The same --seed
draws the same cases; every case's command line is printed, so a failure repeats by itself.
The GPU tests check small problems against a float64 reference; this covers the long ones,
where the persistent CTAs take many works and the rings wrap many times, on problems no test
names.

    tools/bench/random_check.py --cases 60 --seed 1 [--attnc build/tools/attnc]
        [--target sm_90a] [--max-seqlen 6000] [--out table.md]

Prints one line per case and a summary table last; exits 1 if any case fails.
"""

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAD_DIMS = (64, 96, 128, 192, 256)
# FlashMask layouts (causal, columns) the spec accepts.
FLASHMASK_LAYOUTS = ((True, 1), (True, 2), (False, 2), (False, 4))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attnc", default=str(REPO / "build" / "tools" / "attnc"))
    parser.add_argument("--cases", type=int, default=40, help="problems to draw (default 40)")
    parser.add_argument("--target", default="sm_90a",
                        help="the specs' target (default sm_90a; 'none': the device's)")
    add_draw_options(parser, 6000, "the longest Sq or Sk drawn (default 6000)")
    args = parser.parse_args(argv)
    check_draw_options(parser, args, min_seqlen=2)
    if not os.access(args.attnc, os.X_OK):
        parser.error(f"--attnc: '{args.attnc}' is not an executable attnc (build it, or name one)")
    return args


def add_draw_options(parser, max_seqlen, max_seqlen_help):
    """--seed, --max-seqlen and --out, as both randomized checks take them (--cases is each
    script's own, for its default)."""
    parser.add_argument("--seed", type=int, default=None,
                        help="the draw's seed (default: a fresh one, printed)")
    parser.add_argument("--max-seqlen", type=int, default=max_seqlen, help=max_seqlen_help)
    parser.add_argument("--out", default=None, help="also write the summary table here")


def check_draw_options(parser, args, min_seqlen):
    """Refuses --cases below 1 and --max-seqlen below min_seqlen by name; draws a fresh seed
    where none was given."""
    if args.cases < 1:
        parser.error(f"--cases: got {args.cases}; accepted: 1 or more")
    if args.max_seqlen < min_seqlen:
        parser.error(f"--max-seqlen: got {args.max_seqlen}; accepted: {min_seqlen} or more")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)


def length(rng, max_seqlen):
    """A length that is rarely a tile multiple: short ones (1 .. 200) a quarter of the time."""
    if rng.random() < 0.25:
        return rng.randint(1, min(200, max_seqlen))
    return rng.randint(2, max_seqlen)


def draw_case(rng, target, max_seqlen):
    """(family label, attnc run arguments) of one random problem."""
    dtype = rng.choice(("bf16", "fp16"))
    head_dim = rng.choice(HEAD_DIMS)
    kv_heads = rng.choice((1, 2, 3, 4))
    heads = kv_heads * rng.choice((1, 2, 4))
    batch = rng.randint(1, 3)
    seqlen_q = length(rng, max_seqlen)
    seqlen_k = seqlen_q if rng.random() < 0.5 else length(rng, max_seqlen)
    kind = rng.choice(("none", "causal", "sliding_window", "flashmask", "flashmask", "flashmask"))
    extra = []
    if kind == "flashmask":
        causal, columns = rng.choice(FLASHMASK_LAYOUTS)
        mask = f"flashmask(causal={'true' if causal else 'false'},columns={columns})"
        data = rng.choice(("random", "documents"))
        extra += ["--mask-data", data, "--mask-heads", str(rng.choice((1, kv_heads)))]
        family = f"flashmask {'causal ' if causal else ''}c{columns} {data}"
    elif kind == "sliding_window":
        mask = kind
        left = rng.choice((-1, rng.randint(0, seqlen_k)))
        right = rng.choice((-1, 0, rng.randint(0, 300)))
        if left < 0 and right < 0:
            right = 0
        extra += ["--window-left", str(left), "--window-right", str(right)]
        family = kind
    else:
        mask = kind
        family = kind
    spec = f"dtype={dtype} head_dim={head_dim} mask={mask}"
    if target != "none":
        spec += f" target={target}"
    if rng.random() < 0.2:
        extra += ["--softcap", str(rng.choice((2.0, 7.5, 30.0)))]
        family += " softcap"
    if rng.random() < 0.2:
        extra += ["--alibi"]
        family += " alibi"
    arguments = ["run", "--spec", spec, "--batch", str(batch), "--heads", str(heads),
                 "--kv-heads", str(kv_heads), "--seqlen-q", str(seqlen_q), "--seqlen-k",
                 str(seqlen_k), "--seed", str(rng.randrange(1, 2**31)), "--check", "--warmup",
                 "0", "--repeat", "1", "--json"] + extra
    return family, arguments


def run_case(attnc, arguments):
    """(passed, detail) of one `attnc run --check`."""
    run = subprocess.run([attnc] + arguments, capture_output=True, text=True)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if lines:
        try:
            result = json.loads(lines[-1])
        except json.JSONDecodeError:
            return False, f"exit {run.returncode}: output is not JSON: {lines[-1][:200]}"
        check = result.get("check", {})
        detail = (f"O max abs {check.get('max_abs_err', float('nan')):.2e}, rel l2 "
                  f"{check.get('rel_l2_err', float('nan')):.2e}, LSE "
                  f"{check.get('lse_max_err', float('nan')):.2e}, non-finite "
                  f"{check.get('nonfinite', '?')}")
        return run.returncode == 0 and bool(check.get("passed")), detail
    message = (run.stderr.strip() or run.stdout.strip()).splitlines()
    return False, f"exit {run.returncode}: {message[-1] if message else 'no output'}"


def main(argv=None):
    args = parse_args(argv)
    rng = random.Random(args.seed)
    print(f"random_check: {args.cases} cases, seed {args.seed} (--seed {args.seed} repeats them)",
          flush=True)
    tally = {}
    failures = []
    started = time.monotonic()
    for index in range(args.cases):
        family, arguments = draw_case(rng, args.target, args.max_seqlen)
        passed, detail = run_case(args.attnc, arguments)
        counts = tally.setdefault(family, [0, 0])
        counts[0] += 1
        counts[1] += passed
        command = shlex.join([args.attnc] + arguments)
        print(f"{'PASS' if passed else 'FAIL'} {index + 1}/{args.cases} {family}: {detail}\n"
              f"    {command}", flush=True)
        if not passed:
            failures.append(command)
    title = (f"Randomized forward checks (`tools/bench/random_check.py --cases {args.cases} "
             f"--seed {args.seed} --target {args.target} --max-seqlen {args.max_seqlen}`), "
             f"{time.monotonic() - started:.0f} s")
    return report(title, tally, failures, args.out)


def report(title, tally, failures, out=None):
    """Prints the table of cases and passes by family (tally: family -> [cases, passed]) under
    `title`, also into the file `out`, then each failure; 0 if none failed, else 1."""
    lines = [title, "", "| family | cases | passed |", "|---|---:|---:|"]
    for family in sorted(tally):
        lines.append(f"| {family} | {tally[family][0]} | {tally[family][1]} |")
    total = sum(counts[0] for counts in tally.values())
    passed = sum(counts[1] for counts in tally.values())
    lines.append(f"| all | {total} | {passed} |")
    table = "\n".join(lines) + "\n"
    if out:
        Path(out).write_text(table)
    print(table, end="")
    for failure in failures:
        print(f"failed: {failure}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
