"""compare.py's measurements on the GPU: results and their relative errors, CUDA-event times
of a forward or a forward+backward step, the peak memory of one step, and first-call latency."""

import contextlib
import os
import shutil
import tempfile
import time

import torch

import attnjit
import families
from timing import times_ms

GRADIENTS = ("dq", "dk", "dv")
CHUNK = 1 << 26


def relative_error(got, reference):
    """||got - reference|| / ||reference|| in fp32, chunk by chunk (no full fp32 copies)."""
    got, reference = got.reshape(-1), reference.reshape(-1)
    error = norm = 0.0
    for start in range(0, reference.numel(), CHUNK):
        r = reference[start:start + CHUNK].float()
        error += (got[start:start + CHUNK].float() - r).square().sum().item()
        norm += r.square().sum().item()
    return (error / norm) ** 0.5 if norm > 0 else error ** 0.5


def clear_grads(q, k, v):
    q.grad = k.grad = v.grad = None


def results(implementation, q, k, v, d_o, backward):
    """{"o": ...} of one call, and with `backward` also {"dq", "dk", "dv"} of o.backward(d_o)."""
    clear_grads(q, k, v)
    o = implementation(q, k, v)
    out = {"o": o.detach()}
    if backward:
        o.backward(d_o)
        out.update(dq=q.grad, dk=k.grad, dv=v.grad)
        clear_grads(q, k, v)
    return out


def step(implementation, d_o, backward):
    """The timed unit: a forward (of a training step: the inputs require grad), or a forward
    and o.backward(d_o) with fresh gradients."""
    def run(q, k, v):
        o = implementation(q, k, v)
        if backward:
            clear_grads(q, k, v)
            o.backward(d_o)
    return run


def time_step(implementation, inputs, d_o, backward, warmup, runs):
    """(median, min, max) ms of step() over the rotating input sets."""
    times = sorted(times_ms(step(implementation, d_o, backward), inputs, warmup, runs))
    middle = len(times) // 2
    median = times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
    return median, times[0], times[-1]


def step_peak_mib(implementation, inputs, d_o):
    """Peak memory allocated through torch during one forward+backward step, above what was
    allocated before it (the inputs), in MiB."""
    q, k, v = inputs
    clear_grads(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step(implementation, d_o, True)(q, k, v)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    clear_grads(q, k, v)
    return peak / 2**20


@contextlib.contextmanager
def empty_cache_dir():
    """ATTNJIT_CACHE_DIR set to a new empty directory inside the block; the directory removed
    and the variable restored after it."""
    saved = os.environ.get("ATTNJIT_CACHE_DIR")
    os.environ["ATTNJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="attnjit-bench-")
    try:
        yield
    finally:
        shutil.rmtree(os.environ["ATTNJIT_CACHE_DIR"], ignore_errors=True)
        if saved is None:
            del os.environ["ATTNJIT_CACHE_DIR"]
        else:
            os.environ["ATTNJIT_CACHE_DIR"] = saved


def attnjit_latency(mask, head_dim, implementation, inputs, d_o):
    """Rows of attnjit's first-call latency: a cold compile into an empty cache directory, a
    disk hit after clearing the memory cache, a memory hit; each with and without the first
    forward+backward step."""
    specs = [families.attnjit_spec(mask.mask_text, head_dim, direction)
             for direction in ("forward", "backward")]
    rows = []
    try:
        with empty_cache_dir():
            for expected, clear in (("miss", True), ("disk", True), ("memory", False)):
                if clear:
                    attnjit.clear_cache(memory=True)
                torch.cuda.synchronize()
                start = time.perf_counter()
                levels = [attnjit.compile(spec).info()["cache"] for spec in specs]
                compiled = time.perf_counter()
                step(implementation, d_o, True)(*inputs)
                torch.cuda.synchronize()
                done = time.perf_counter()
                note = "" if levels == [expected] * 2 else f"cache levels {levels}"
                what = {"miss": "cold compile (empty cache directory)",
                        "disk": "disk hit (memory cache cleared)", "memory": "memory hit"}[expected]
                rows.append(dict(impl="attnjit", what=f"{what}: compile forward + backward",
                                 ms=(compiled - start) * 1e3, note=note))
                rows.append(dict(impl="attnjit", what=f"{what}: compile + first fwd+bwd step",
                                 ms=(done - start) * 1e3, note=note))
    finally:
        attnjit.clear_cache(memory=True)
    return rows


def flex_latency(implementation, inputs, d_o):
    """FlexAttention's first forward+backward step (torch.compile included, after resetting
    dynamo; inductor's on-disk caches as found) and its second."""
    torch._dynamo.reset()
    rows = []
    for what in ("first fwd+bwd step, torch.compile included", "second fwd+bwd step"):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(implementation, d_o, True)(*inputs)
        torch.cuda.synchronize()
        rows.append(dict(impl="FlexAttention", what=what, ms=(time.perf_counter() - start) * 1e3,
                         note="block mask made before"))
    return rows
