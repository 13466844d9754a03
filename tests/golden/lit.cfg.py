# lit configuration of the golden tests: attnc's IR, generated CUDA, PTX, diagnostics and
# kernel cache, checked with FileCheck.
#
#   python3 lit.py -sv tests/golden --param attnc=build/tools/attnc
#
# Parameters (--param NAME=VALUE):
#   attnc      the attnc binary under test (required)
#   filecheck  FileCheck (default: the llvm-14 one)
#   output     where the tests write their files (default: a directory under the system
#              temporary directory, one per attnc binary)
#
# Substitutions:
#   %attnc        attnc with ATTNJIT_CACHE_DIR=%t.cache, so that every test file has its
#                 own kernel cache; a test that relies on the cache starts with
#                 `rm -rf %t.cache`
#   %attnc-bin    the bare binary, for tests that set up the environment themselves
#   %expect_exit  expect_exit.py: a command's exact exit status and line counts
#   %python       the Python running lit
#   FileCheck     the configured FileCheck
#
# The environment passed to tests has no HOME, XDG_CACHE_HOME or ATTNJIT_CACHE_DIR, so a
# command that forgets %attnc's cache directory compiles without a disk cache, with a warning
# on stderr that the tests' line counts catch, instead of using the user's cache.
#
# Features: `gpu` when `nvidia-smi -L` lists a device, `cuda-driver` when libcuda.so.1 loads.

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

import lit.formats

config.name = "attnjit-golden"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))


def required_file(param, default=None):
    value = lit_config.params.get(param, default)
    if not value:
        lit_config.fatal(f"missing --param {param}=PATH (the {param} binary to test with)")
    path = os.path.abspath(value)
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        lit_config.fatal(f"--param {param}: '{path}' is not an executable file")
    return path


attnc = required_file("attnc")
filecheck = required_file("filecheck", "/usr/lib/llvm-14/bin/FileCheck")

output = lit_config.params.get("output")
if output:
    config.test_exec_root = os.path.abspath(output)
else:
    tag = hashlib.sha256(attnc.encode()).hexdigest()[:12]
    config.test_exec_root = os.path.join(tempfile.gettempdir(), f"attnjit-golden-{tag}")

# NVRTC looks for the toolkit's headers through these.
for variable in ("CUDA_HOME", "CUDA_PATH"):
    if os.environ.get(variable):
        config.environment[variable] = os.environ[variable]

python = sys.executable
expect_exit = os.path.join(config.test_source_root, "expect_exit.py")

# Applied in order: %attnc-bin before its prefix %attnc.
config.substitutions.append(("%attnc-bin", attnc))
config.substitutions.append(("%attnc", f"env ATTNJIT_CACHE_DIR=%t.cache {attnc}"))
config.substitutions.append(("%expect_exit", f"{python} {expect_exit}"))
config.substitutions.append(("%python", python))
config.substitutions.append((r"(?<![\w./-])FileCheck(?![\w.-])", filecheck))


def has_gpu():
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def has_cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


if has_gpu():
    config.available_features.add("gpu")
if has_cuda_driver():
    config.available_features.add("cuda-driver")
