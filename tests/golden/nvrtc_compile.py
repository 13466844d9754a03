"""Compiles one CUDA C++ file with NVRTC, alone: no headers handed to NVRTC, no include paths.

    nvrtc_compile.py --arch ARCH FILE

Prints the PTX on stdout and exits 0; on a compile failure prints NVRTC's log on stderr and
exits 1. The golden tests use it to show that what `attnc emit --stage cuda --expand` prints is
a whole program. NVRTC is loaded from $CUDA_HOME, $CUDA_PATH or /usr/local/cuda (lib64, lib),
else from the loader's path.
"""

import argparse
import ctypes
import glob
import os
import sys


def load_nvrtc():
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    candidates = []
    for home in filter(None, homes):
        for lib in ("lib64", "lib"):
            candidates += sorted(glob.glob(os.path.join(home, lib, "libnvrtc.so*")))
    candidates = [c for c in candidates if "builtins" not in os.path.basename(c)]
    for name in candidates + ["libnvrtc.so"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    sys.exit("nvrtc_compile.py: cannot load libnvrtc.so (tried " + ", ".join(candidates) + ")")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", required=True)
    parser.add_argument("file")
    args = parser.parse_args()
    with open(args.file, "rb") as f:
        source = f.read()

    nvrtc = load_nvrtc()
    nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
    program = ctypes.c_void_p()
    name = os.path.basename(args.file).encode()
    status = nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, name, 0, None, None)
    if status != 0:
        sys.exit(f"nvrtcCreateProgram: {nvrtc.nvrtcGetErrorString(status).decode()}")
    options = [f"--gpu-architecture={args.arch}".encode(), b"-std=c++17"]
    option_array = (ctypes.c_char_p * len(options))(*options)
    compiled = nvrtc.nvrtcCompileProgram(program, len(options), option_array)

    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    if compiled != 0:
        sys.stderr.write(log.value.decode(errors="replace"))
        sys.exit(f"nvrtc_compile.py: {args.file}: "
                 f"{nvrtc.nvrtcGetErrorString(compiled).decode()}")

    nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(program, ptx)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    sys.stdout.write(ptx.value.decode())


if __name__ == "__main__":
    main()
