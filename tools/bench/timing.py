"""CUDA-event timing shared by the benchmark scripts."""

import statistics

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


def median_ms(run, inputs, warmup, runs):
    """Median of times_ms(run, inputs, warmup, runs)."""
    return statistics.median(times_ms(run, inputs, warmup, runs))
