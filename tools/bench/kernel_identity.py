#!/usr/bin/env python3
"""Whether two attnc builds generate the same machine code for the same specs.

For each spec, each build's `attnc emit --stage ptx` (every kernel of the spec's plan, one PTX
module each) is assembled by the toolkit's ptxas for --arch, and every kernel's code section
(.text.<kernel> of the cubin: its SASS, without symbols or constants) is compared byte for
byte. A change that claims to leave kernels alone (a refactor, a change that should only touch
other head dims or masks) is checked here without a GPU: identical code needs no new
measurement. Prints a table, the verdict last; exits 1 when a kernel differs or is missing, 2
when a build cannot emit a spec or ptxas fails.

    python3 tools/bench/kernel_identity.py --a old/attnc --b build/tools/attnc \\
        --spec "dtype=bf16 head_dim=128 mask=causal" --spec "dtype=bf16 head_dim=64 mask=none"
"""

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ELF_MAGIC = b"\x7fELF"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="the first build's attnc")
    parser.add_argument("--b", required=True, help="the second build's attnc")
    parser.add_argument("--spec", action="append", required=True,
                        help="a spec as attnc takes it (repeatable)")
    parser.add_argument("--arch", default="sm_90a", help="a real architecture: sm_<NN>[a]")
    parser.add_argument("--ptxas", default=None,
                        help="ptxas to assemble with (default: on PATH, else CUDA_HOME's or "
                             "/usr/local/cuda's bin)")
    args = parser.parse_args(argv)
    if not args.arch.startswith("sm_"):
        parser.error(f"--arch: got '{args.arch}'; accepted: a real architecture sm_<NN>[a] "
                     "(PTX alone has no machine code to compare)")
    for name in ("a", "b"):
        if not os.access(getattr(args, name), os.X_OK):
            parser.error(f"--{name}: '{getattr(args, name)}' is not an executable attnc")
    return args


def find_ptxas(explicit):
    cuda_home = os.environ.get("CUDA_HOME")
    candidates = [explicit] if explicit else [
        shutil.which("ptxas"),
        os.path.join(cuda_home, "bin", "ptxas") if cuda_home else None,
        "/usr/local/cuda/bin/ptxas",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("kernel_identity: no ptxas found (--ptxas PATH, PATH or CUDA_HOME)")


def split_modules(ptx_text):
    """attnc's PTX output, one module per kernel: each starts at a `.version` line."""
    modules, current = [], None
    for line in ptx_text.splitlines(keepends=True):
        if line.startswith(".version"):
            current = []
            modules.append(current)
        if current is not None:
            current.append(line)
    return ["".join(module) for module in modules]


def entry_names(module):
    names = []
    for line in module.splitlines():
        words = line.split()
        if ".entry" in words:
            names.append(words[words.index(".entry") + 1].split("(")[0])
    return names


def code_sections(elf):
    """{kernel: bytes of .text.<kernel>} of a 64-bit little-endian ELF (a cubin)."""
    if elf[:4] != ELF_MAGIC or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF")
    (section_offset,) = struct.unpack_from("<Q", elf, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, section_offset + i * entry_size)
               for i in range(count)]
    names_at = headers[names_index][4]

    def name(offset):
        end = elf.index(b"\0", names_at + offset)
        return elf[names_at + offset:end].decode()

    sections = {}
    for header in headers:
        section = name(header[0])
        if section.startswith(".text."):
            sections[section[len(".text."):]] = elf[header[4]:header[4] + header[5]]
    return sections


def machine_code(attnc, spec, arch, ptxas, scratch):
    """{kernel: code bytes} of every kernel attnc plans for spec."""
    emitted = subprocess.run([attnc, "emit", "--stage", "ptx", "--arch", arch, "--spec", spec],
                             capture_output=True, text=True,
                             env={**os.environ, "ATTNJIT_DISK_CACHE": "off"})
    if emitted.returncode != 0:
        raise RuntimeError(f"{attnc} emit failed for '{spec}': {emitted.stderr.strip()}")
    code = {}
    for i, module in enumerate(split_modules(emitted.stdout)):
        ptx = Path(scratch) / f"module{i}.ptx"
        cubin = Path(scratch) / f"module{i}.cubin"
        ptx.write_text(module)
        assembled = subprocess.run([ptxas, f"-arch={arch}", str(ptx), "-o", str(cubin)],
                                   capture_output=True, text=True)
        if assembled.returncode != 0:
            raise RuntimeError(f"ptxas failed on a module of '{spec}': {assembled.stderr.strip()}")
        sections = code_sections(cubin.read_bytes())
        for kernel in entry_names(module):
            code[kernel] = sections.get(kernel, b"")
    return code


def compare(code_a, code_b):
    """Rows (kernel, size a, size b, verdict) over both builds' kernels."""
    rows = []
    for kernel in sorted(set(code_a) | set(code_b)):
        a, b = code_a.get(kernel), code_b.get(kernel)
        if a is None or b is None:
            verdict = "only in " + ("b" if a is None else "a")
        elif a == b:
            verdict = "identical"
        else:
            # SASS instructions are 16 bytes on sm_70 and later.
            slots = range(0, max(len(a), len(b)), 16)
            changed = sum(1 for i in slots if a[i:i + 16] != b[i:i + 16])
            verdict = f"differs ({changed} of {len(slots)} instructions)"
        rows.append((kernel, len(a) if a is not None else 0, len(b) if b is not None else 0,
                     verdict))
    return rows


def main(argv=None):
    args = parse_args(argv)
    ptxas = find_ptxas(args.ptxas)
    print(f"| spec | kernel | bytes a | bytes b | code ({args.arch}) |")
    print("|---|---|---:|---:|---|")
    all_identical = True
    with tempfile.TemporaryDirectory() as scratch:
        for spec in args.spec:
            try:
                code_a = machine_code(args.a, spec, args.arch, ptxas, scratch)
                code_b = machine_code(args.b, spec, args.arch, ptxas, scratch)
            except RuntimeError as error:
                print(f"kernel_identity: {error}", file=sys.stderr)
                return 2
            for kernel, size_a, size_b, verdict in compare(code_a, code_b):
                all_identical &= verdict == "identical"
                print(f"| `{spec}` | {kernel} | {size_a} | {size_b} | {verdict} |")
    print("every kernel identical" if all_identical else "kernels differ")
    return 0 if all_identical else 1


if __name__ == "__main__":
    sys.exit(main())
