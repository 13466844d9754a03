"""Builds libattnjit.so with CMake and installs the `attnjit` package (tools/python/attnjit)
with the library inside it, so that `import attnjit` needs no environment variable:

    python3 -m pip install --no-build-isolation .

Needs the build dependencies of tools/install-deps.sh (CMake, a C++20 compiler, the CUDA
toolkit's NVRTC) and nothing from the network. The version is CMake's project version.
Environment:
    ATTNJIT_CMAKE_BUILD_DIR  the CMake build tree to use (default: build/python/cmake); an
                             existing, configured tree (e.g. build/) is built as it is
    ATTNJIT_CMAKE_ARGS       extra arguments for the CMake configure step
    CUDA_HOME                the CUDA toolkit (default /usr/local/cuda when it exists)
"""

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
LIBRARY = "libattnjit.so"


def project_version():
    """The VERSION of project(attnjit ...) in CMakeLists.txt: the one place it is written."""
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*attnjit\s+VERSION\s+([0-9][0-9.]*)", text)
    if match is None:
        raise RuntimeError("CMakeLists.txt: no 'project(attnjit VERSION x.y.z' to read the "
                           "version from")
    return match.group(1)


def build_library():
    """Configures (once) and builds the attnjit_shared target; returns the library's path."""
    build_dir = Path(os.environ.get("ATTNJIT_CMAKE_BUILD_DIR") or ROOT / "build/python/cmake")
    build_dir = build_dir.resolve()
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("attnjit: cmake not found; install the build dependencies "
                           "(tools/install-deps.sh)")
    if not (build_dir / "CMakeCache.txt").is_file():
        command = [cmake, "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                   "-DATTNJIT_BUILD_TESTS=OFF"]
        if shutil.which("ninja"):
            command += ["-G", "Ninja"]
        cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        if cuda is None and Path("/usr/local/cuda").is_dir():
            cuda = "/usr/local/cuda"
        if cuda:
            command.append(f"-DCUDAToolkit_ROOT={cuda}")
        command += shlex.split(os.environ.get("ATTNJIT_CMAKE_ARGS", ""))
        subprocess.run(command, check=True)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    subprocess.run([cmake, "--build", str(build_dir), "--target", "attnjit_shared", "-j", jobs],
                   check=True)
    library = build_dir / LIBRARY
    if not library.is_file():
        raise RuntimeError(f"attnjit: the build did not produce {library}")
    return library


class BuildPyWithLibrary(build_py):
    """build_py that also builds libattnjit.so and places it inside the package."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "attnjit" / LIBRARY
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_library(), target)


class BinaryDistribution(Distribution):
    """The wheel holds a shared library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(
    version=project_version(),
    packages=["attnjit"],
    package_dir={"attnjit": "tools/python/attnjit"},
    cmdclass={"build_py": BuildPyWithLibrary},
    distclass=BinaryDistribution,
    zip_safe=False,
)
