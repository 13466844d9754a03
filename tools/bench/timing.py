"""CUDA-event timing, the problem options and the report output shared by the benchmark
scripts."""

import argparse
import statistics
import sys
from pathlib import Path

import torch


def times_ms(run, inputs, warmup, runs):
    """Times of run(*inputs[i % n]) in ms, one CUDA event pair per call, in call order, after
    `warmup` untimed calls; rotating among the input sets keeps them out of L2."""
    for i in range(warmup):
        run(*inputs[i % len(inputs)])
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for i in range(runs):
        starts[i].record()
        run(*inputs[i % len(inputs)])
        ends[i].record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


def problem_parser(description, warmup):
    """An argument parser with the options the side-by-side scripts share: the problem
    (--batch, --heads, --seqlen, --head-dim, defaults 1 x 16 x 8192 x 128), the timing (--runs,
    --warmup) and --out for the markdown report."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--out", help="also write the markdown report here")
    return parser


def median_ms(run, inputs, warmup, runs):
    """Median of times_ms(run, inputs, warmup, runs)."""
    return statistics.median(times_ms(run, inputs, warmup, runs))


def publish(text, out, failures):
    """Prints the markdown report `text` last (and writes it to `out` when given); exits 1
    when there are `failures`."""
    if out:
        Path(out).write_text(text)
    print(text, end="")
    if failures:
        sys.exit(1)
