#!/usr/bin/env python3
"""Where the cold compile of one generated kernel goes, for template directories side by side.

For a spec, `attnc emit --stage cuda` gives the kernels' sources; the kernel of --role is
compiled by NVRTC (as the library does: `--gpu-architecture`, `-std=c++17`, `-default-device`,
the templates as an include path) to PTX alone (the front end and NVVM) and whole (PTX and
ptxas), and its PTX is assembled by the toolkit's ptxas (its own "Compile time"). Each
--templates directory (a scratch copy of templates/ with a change) is timed in the same rounds,
interleaved, the minimum of --repeats per round: the build machine's speed moves within
minutes, so only entries of one round compare. With --products, the ptxas time of the first
directory's PTX is also taken with each wgmma product (the wgmma between two commits) removed,
and with all removed: what each copy of a product costs ptxas (the kernel is then wrong).

    python3 tools/bench/compile_stages.py --spec "dtype=bf16 head_dim=128 mask=causal target=sm_90a" \\
        --templates templates --templates /tmp/variant --rounds 3 --products
"""

import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_identity import find_ptxas  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KERNEL_HEADER = re.compile(r"^// ===== kernel @(\S+) \(([^)]+)\) =====$")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="a spec as attnc takes it")
    parser.add_argument("--templates", action="append", default=None,
                        help="a templates directory (repeatable; default: the repository's)")
    parser.add_argument("--attnc", default=str(REPO / "build" / "tools" / "attnc"),
                        help="the attnc that emits the sources (default: build/tools/attnc)")
    parser.add_argument("--role", default="forward",
                        help="the kernel's role in the plan (forward, backward, ...)")
    parser.add_argument("--arch", default="sm_90a", help="a real architecture: sm_<NN>[a]")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="compiles per entry and round, the minimum kept (default 3)")
    parser.add_argument("--products", action="store_true",
                        help="also ptxas without each wgmma product of the first directory")
    parser.add_argument("--ptxas", default=None, help="ptxas to assemble with")
    args = parser.parse_args(argv)
    if not args.arch.startswith("sm_"):
        parser.error(f"--arch: got '{args.arch}'; accepted: a real architecture sm_<NN>[a]")
    for name in ("rounds", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: got {getattr(args, name)}; accepted: 1 or more")
    if not os.access(args.attnc, os.X_OK):
        parser.error(f"--attnc: '{args.attnc}' is not an executable attnc (build it, or name one)")
    args.templates = args.templates or [str(REPO / "templates")]
    for directory in args.templates:
        if not (Path(directory) / "attnjit").is_dir():
            parser.error(f"--templates: '{directory}' has no attnjit/ directory of templates")
    return args


def split_kernels(emitted):
    """[(name, role, source)] of `attnc emit --stage cuda`'s output, in order."""
    kernels = []
    for line in emitted.splitlines(keepends=True):
        header = KERNEL_HEADER.match(line.rstrip("\n"))
        if header:
            kernels.append([header.group(1), header.group(2), ""])
        if kernels:
            kernels[-1][2] += line
    return [tuple(kernel) for kernel in kernels]


def product_groups(ptx):
    """Line indices of the PTX's wgmma.mma_async instructions, one list per product: the wgmma
    between two wgmma.commit_group (a kernel commits each product as its own group)."""
    groups, current = [], []
    for index, line in enumerate(ptx.splitlines()):
        if "wgmma.mma_async" in line:
            current.append(index)
        elif "wgmma.commit_group" in line and current:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def without_lines(ptx, indices):
    drop = set(indices)
    return "\n".join(line for i, line in enumerate(ptx.splitlines()) if i not in drop) + "\n"


class Nvrtc:
    """The few NVRTC calls a timing needs, through ctypes."""

    def __init__(self):
        roots = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
        names = [str(Path(root) / lib / "libnvrtc.so") for root in roots if root
                 for lib in ("lib64", "lib")] + ["libnvrtc.so.13", "libnvrtc.so"]
        errors = []
        for name in names:
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError as error:
                errors.append(str(error))
        else:
            raise SystemExit("compile_stages: no libnvrtc found (CUDA_HOME or /usr/local/cuda): "
                             + "; ".join(errors[-2:]))
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def compile(self, source, options):
        """(milliseconds, PTX text) of one compile; raises with NVRTC's log on failure."""
        program = ctypes.c_void_p()
        self._check(self.lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(),
                                                b"kernel.cu", 0, None, None), "create")
        try:
            encoded = [option.encode() for option in options]
            array = (ctypes.c_char_p * len(encoded))(*encoded)
            started = time.perf_counter()
            result = self.lib.nvrtcCompileProgram(program, len(encoded), array)
            milliseconds = (time.perf_counter() - started) * 1e3
            if result != 0:
                raise RuntimeError(f"NVRTC: {self.lib.nvrtcGetErrorString(result).decode()}\n"
                                   + self._text(program, "nvrtcGetProgramLogSize",
                                                "nvrtcGetProgramLog"))
            return milliseconds, self._text(program, "nvrtcGetPTXSize", "nvrtcGetPTX")
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(program))

    def _text(self, program, size_call, get_call):
        size = ctypes.c_size_t()
        getattr(self.lib, size_call)(program, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(size.value)
        getattr(self.lib, get_call)(program, buffer)
        return buffer.value.decode(errors="replace")

    def _check(self, result, what):
        if result != 0:
            raise RuntimeError(f"NVRTC {what}: {self.lib.nvrtcGetErrorString(result).decode()}")


def ptxas_ms(ptxas, arch, ptx, scratch):
    """(ptxas's reported compile time in ms, its C75xx reports, spilled bytes) for a PTX text."""
    path = Path(scratch) / "kernel.ptx"
    path.write_text(ptx)
    run = subprocess.run([ptxas, f"-arch={arch}", "-v", str(path), "-o", os.devnull],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"ptxas failed: {run.stderr.strip()[:2000]}")
    reported = re.search(r"Compile time = ([\d.]+) ms", run.stderr)
    spills = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", run.stderr))
    return (float(reported.group(1)) if reported else float("nan"),
            len(re.findall(r"\(C75\d\d\)", run.stderr)), spills)


def main(argv=None):
    args = parse_args(argv)
    emitted = subprocess.run([args.attnc, "emit", "--stage", "cuda", "--spec", args.spec],
                             capture_output=True, text=True,
                             env={**os.environ, "ATTNJIT_DISK_CACHE": "off"})
    if emitted.returncode != 0:
        raise SystemExit(f"compile_stages: {args.attnc} emit failed: {emitted.stderr.strip()}")
    kernels = [k for k in split_kernels(emitted.stdout) if k[1] == args.role]
    if not kernels:
        roles = sorted({k[1] for k in split_kernels(emitted.stdout)})
        raise SystemExit(f"compile_stages: --role: got '{args.role}'; the plan has "
                         f"{', '.join(roles) or 'no kernels'}")
    name, _, source = kernels[0]
    nvrtc = Nvrtc()
    ptxas = find_ptxas(args.ptxas)
    virtual = "compute_" + args.arch[len("sm_"):]
    common = ["-std=c++17", "-default-device"]
    print(f"{name} ({args.spec}); minimum of {args.repeats} per entry and round, ms")
    print("| templates | round | NVRTC to PTX | ptxas | whole compile | ptxas C75xx | spilled |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    first_ptx = None
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(1, args.rounds + 1):
            for directory in args.templates:
                include = [f"-I{directory}"]
                # The PTX of the timed compiles is the one assembled below (no extra compile).
                compiled = [nvrtc.compile(source, [f"--gpu-architecture={virtual}"] + common
                                          + include) for _ in range(args.repeats)]
                to_ptx = min(milliseconds for milliseconds, _ in compiled)
                ptx = compiled[0][1]
                first_ptx = first_ptx or ptx
                assembled = [ptxas_ms(ptxas, args.arch, ptx, scratch)
                             for _ in range(args.repeats)]
                whole = min(nvrtc.compile(source, [f"--gpu-architecture={args.arch}",
                                                   "--ptxas-options=-v"] + common + include)[0]
                            for _ in range(args.repeats))
                print(f"| {directory} | {round_} | {to_ptx:.0f} | "
                      f"{min(a[0] for a in assembled):.0f} | {whole:.0f} | "
                      f"{assembled[0][1]} | {assembled[0][2]} |", flush=True)
        if args.products:
            groups = product_groups(first_ptx)
            print(f"\nptxas on {args.templates[0]}'s PTX ({sum(map(len, groups))} wgmma in "
                  f"{len(groups)} products), minimum of {args.repeats}, ms")
            print("| PTX | ptxas |")
            print("|---|---:|")
            cases = [("as generated", [])]
            cases += [(f"without product {i + 1} ({len(g)} wgmma, from PTX line {g[0] + 1})", g)
                      for i, g in enumerate(groups)]
            cases.append(("without any wgmma", [i for g in groups for i in g]))
            for label, dropped in cases:
                ptx = without_lines(first_ptx, dropped)
                best = min(ptxas_ms(ptxas, args.arch, ptx, scratch)[0]
                           for _ in range(args.repeats))
                print(f"| {label} | {best:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
