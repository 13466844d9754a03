"""Host time per call at a launch-bound size (B=1, S=128, H=1, d=64, bf16), in one process:
attnjit.forward, attnjit.attention forward+backward and SDPA flash (forward, forward+backward),
with the breakdown of attnjit.forward's host time into its Python layer, the ctypes call and
the C++ launch path.

Each figure is the median over rounds of 200 calls of the time to enqueue them (the host
clock around the loop, the GPU work waited for after each round, never inside it), so it is
what the host spends per call, not the kernels' time. The C++ part comes from
tools/bench/launch_overhead.cpp (same size and kernel, without torch), run by this script
when --launch-overhead names the binary.

    python3 tools/bench/host_overhead.py --launch-overhead build/tools/launch_overhead \\
        --out docs/benchmarks/<date>-host-overhead.md
"""

import argparse
import ctypes
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import attnjit  # noqa: E402
from attnjit import _ffi, _launch  # noqa: E402

ROUNDS, CALLS = 30, 200


def host_us(call):
    """Median host microseconds per call of `call` over ROUNDS rounds of CALLS calls."""
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            call()
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch-overhead", help="the launch_overhead binary (C++ part)")
    parser.add_argument("--out", help="write the markdown table here")
    parser.add_argument("--json", help="write the figures as JSON here")
    args = parser.parse_args()

    device = torch.device("cuda:0")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 128, 1, 64, dtype=torch.bfloat16, device=device)
               for _ in range(3))
    q_grad, k_grad, v_grad = (t.clone().requires_grad_() for t in (q, k, v))
    d_o = torch.randn_like(q)
    # SDPA's layout is [B, H, S, D].
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    qt_grad, kt_grad, vt_grad = (t.clone().requires_grad_() for t in (qt, kt, vt))
    d_ot = d_o.transpose(1, 2).contiguous()

    results = {}

    def attention_step():
        o = attnjit.attention(q_grad, k_grad, v_grad)
        o.backward(d_o)

    results["attnjit.forward"] = host_us(lambda: attnjit.forward(q, k, v))
    attnjit._EAGER_DIRECT = False
    results["attnjit.forward through torch.ops.attnjit"] = host_us(
        lambda: attnjit.forward(q, k, v))
    results["attnjit.attention fwd+bwd through torch.ops.attnjit"] = host_us(attention_step)
    attnjit._EAGER_DIRECT = True
    results["attnjit.attention fwd+bwd"] = host_us(attention_step)

    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        results["SDPA flash forward"] = host_us(lambda: F.scaled_dot_product_attention(qt, kt, vt))

        def sdpa_step():
            o = F.scaled_dot_product_attention(qt_grad, kt_grad, vt_grad)
            o.backward(d_ot)

        results["SDPA flash fwd+bwd"] = host_us(sdpa_step)

    # The breakdown of attnjit.forward: the launch layer without the argument checks, then the
    # bare ctypes call of the prepared launch with its pointers and stream ready.
    results["_launch.forward (no argument checks)"] = host_us(
        lambda: _launch.forward(torch, q, k, v, None, None, "none", False, 0.0, -1, 0, 0.0,
                                False, ""))
    o = torch.empty_like(q)
    compiled, _ = _launch.kernel(_launch.spec_text(q.dtype, 64, 64, "none", False, 0, False,
                                                   False, False), 0)
    slots = (q, k, v, o, None, None, None, None, None, None, None)
    _launch.run(torch, compiled, slots, (0.0, -1, 0, 0.0), 0)
    launch = next(value for key, value in _launch._launches.items()
                  if key[0] == compiled._handle.value and key[3][0] == (q.shape, q.stride()))
    data = (ctypes.c_void_p * _ffi.SLOT_COUNT)(*[0 if t is None else t.data_ptr() for t in slots])
    stream = _launch.stream_of(torch, 0)
    run = _ffi.lib.attnjit_launch_run
    results["ctypes attnjit_launch_run (pointers, stream ready)"] = host_us(
        lambda: run(launch.handle, data, _ffi.SLOT_COUNT, stream))
    results["torch: 1 new_empty"] = host_us(lambda: q.new_empty((1, 128, 1, 64)))
    results["torch: raw stream query"] = host_us(lambda: _launch.stream_of(torch, 0))

    cpp = {}
    if args.launch_overhead:
        text = subprocess.run([args.launch_overhead], check=True, capture_output=True,
                              text=True).stdout
        for line in text.splitlines():
            for name in ("attnjit_launch_run", "jit::Kernel::forward"):
                if line.startswith(name):
                    cpp[name] = float(line.split()[1])
        print(text)

    table = render(results, cpp)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"python": results, "cpp": cpp}, indent=2))


def render(results, cpp):
    props = torch.cuda.get_device_properties(0)
    forward = results["attnjit.forward"]
    impl = results["_launch.forward (no argument checks)"]
    ctypes_call = results["ctypes attnjit_launch_run (pointers, stream ready)"]
    lines = [
        "# Host overhead per call, launch-bound size",
        "",
        f"Device: {props.name}; torch {torch.__version__}; attnjit {attnjit.version()}; "
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}. bf16, B=1, S=128, H=1, d=64, mask none. "
        f"Median over {ROUNDS} rounds of {CALLS} calls of the host time to enqueue a call "
        "(GPU work waited for between rounds only).",
        "",
        "Command: `python3 tools/bench/host_overhead.py --launch-overhead "
        "build/tools/launch_overhead --out <this file>`",
        "",
        "| call | host us per call |",
        "|---|---:|",
    ]
    for name, value in results.items():
        lines.append(f"| {name} | {value:.1f} |")
    for name, value in cpp.items():
        lines.append(f"| C++: {name} (launch_overhead, no torch) | {value:.1f} |")
    lines += ["", "Breakdown of attnjit.forward:", "",
              "| part | us |", "|---|---:|",
              f"| argument checks (attnjit.forward - _launch.forward) | {forward - impl:.1f} |",
              f"| launch layer: cache look-ups, 1 output allocation, pointers, stream "
              f"(_launch.forward - ctypes call) | {impl - ctypes_call:.1f} |"]
    if "attnjit_launch_run" in cpp:
        lines += [f"| ctypes (ctypes call - C++ attnjit_launch_run) | "
                  f"{ctypes_call - cpp['attnjit_launch_run']:.1f} |",
                  f"| C++ launch path (attnjit_launch_run: checks, params, cuLaunchKernel) | "
                  f"{cpp['attnjit_launch_run']:.1f} |"]
    else:
        lines.append(f"| ctypes + C++ launch path | {ctypes_call:.1f} |")
    sdpa = results["SDPA flash forward"]
    lines += ["", f"attnjit.forward / SDPA flash forward: {forward / sdpa:.2f} "
              f"({forward:.1f} vs {sdpa:.1f} us).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
