"""The PEP 517 build backend of the attnjit Python package (pyproject.toml names it), written
with the standard library alone so that `python3 -m pip install .` needs nothing from a
package index, with or without build isolation.

A wheel holds tools/python/attnjit with libattnjit.so inside it, built by CMake (only the
attnjit_shared target). The CMake build tree is $ATTNJIT_CMAKE_BUILD_DIR (relative paths are
taken from the source tree), else build/ when it is a configured tree of this source tree,
else build/python/cmake, configured here on first use with $ATTNJIT_CMAKE_ARGS and the CUDA
toolkit of $CUDA_HOME, $CUDA_PATH or /usr/local/cuda. The version is the one of
project(attnjit VERSION ...) in CMakeLists.txt.
"""

import base64
import gzip
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "attnjit"
SUMMARY = "JIT-compiled fused attention kernels (FlashAttention structure, FlashMask masks)"
REQUIRES_PYTHON = ">=3.9"
LIBRARY = "libattnjit.so"
PACKAGE_DIR = Path("tools/python/attnjit")
PRIVATE_BUILD_DIR = Path("build/python/cmake")
# Every zip and tar entry gets this time, so equal inputs give byte-identical archives.
EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can hold


def project_version(root=ROOT):
    """The VERSION of project(attnjit ...) in CMakeLists.txt: the one place it is written."""
    text = (root / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*attnjit\s+VERSION\s+([0-9][0-9.]*)", text)
    if match is None:
        raise RuntimeError("CMakeLists.txt: no 'project(attnjit VERSION x.y.z' to read the "
                           "version from")
    return match.group(1)


def metadata_text(version):
    """The core metadata (METADATA in a wheel, PKG-INFO in an sdist)."""
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            f"Requires-Python: {REQUIRES_PYTHON}\n")


def platform_tag():
    """The wheel's platform tag: the library is native code, but does not depend on the
    Python version or ABI (ctypes loads it)."""
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def configured_source(build_dir):
    """The source directory a configured CMake tree was made from, or None."""
    try:
        cache = (build_dir / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.MULTILINE)
    return Path(match.group(1)) if match else None


def build_tree(root=ROOT, environ=os.environ):
    """The CMake build tree to build the library in (see the module's docstring)."""
    configured = environ.get("ATTNJIT_CMAKE_BUILD_DIR")
    if configured:
        return (root / configured).resolve()
    source = configured_source(root / "build")
    if source is not None and source.resolve() == root.resolve():
        return (root / "build").resolve()
    return (root / PRIVATE_BUILD_DIR).resolve()


def log(message):
    """A line of the build's log (pip shows it with -v, or when the build fails)."""
    print(f"attnjit: {message}", file=sys.stderr, flush=True)


def build_library():
    """Configures the build tree when it is not yet, brings the attnjit_shared target up to
    date, and returns the library's path."""
    build_dir = build_tree()
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("attnjit: cmake not found; install the build dependencies "
                           "(tools/install-deps.sh)")
    if not (build_dir / "CMakeCache.txt").is_file():
        log(f"configuring {build_dir}")
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
    log(f"building the attnjit_shared target in {build_dir}")
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    subprocess.run([cmake, "--build", str(build_dir), "--target", "attnjit_shared", "-j", jobs],
                   check=True)
    library = build_dir / LIBRARY
    if not library.is_file():
        raise RuntimeError(f"attnjit: the build did not produce {library}")
    return library


def package_files(root=ROOT):
    """(path in the wheel, file) for the package's sources, in a fixed order."""
    package = root / PACKAGE_DIR
    files = []
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package)
        if (path.is_file() and "__pycache__" not in relative.parts
                and path.suffix not in (".pyc", ".so")):
            files.append((f"{NAME}/{relative.as_posix()}", path))
    return files


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def dist_info_name(version):
    return f"{NAME}-{version}.dist-info"


def wheel_text():
    return (f"Wheel-Version: 1.0\nGenerator: attnjit build_backend\nRoot-Is-Purelib: false\n"
            f"Tag: py3-none-{platform_tag()}\n")


def write_wheel(wheel_directory, library, root=ROOT):
    """Writes the wheel of the package with `library` inside it; returns its file name."""
    version = project_version(root)
    dist_info = dist_info_name(version)
    entries = [(name, path.read_bytes(), 0o644) for name, path in package_files(root)]
    entries.append((f"{NAME}/{LIBRARY}", Path(library).read_bytes(), 0o755))
    entries.append((f"{dist_info}/METADATA", metadata_text(version).encode(), 0o644))
    entries.append((f"{dist_info}/WHEEL", wheel_text().encode(), 0o644))
    record = [record_line(name, data) for name, data, _ in entries]
    record.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))

    filename = f"{NAME}-{version}-py3-none-{platform_tag()}.whl"
    stamp = time.gmtime(EPOCH)[:6]
    target = Path(wheel_directory) / filename
    partial = target.with_name(target.name + ".part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    partial.replace(target)
    return filename


def sdist_files(root=ROOT):
    """The source files an sdist carries: in a git checkout, the files git tracks or does not
    ignore; in an unpacked sdist (it has PKG-INFO), every file but the build trees."""
    if (root / ".git").exists():
        listing = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached",
                                  "--others", "--exclude-standard"],
                                 check=True, capture_output=True).stdout.decode()
        names = [name for name in listing.split("\0") if name and (root / name).is_file()]
    elif (root / "PKG-INFO").is_file():
        names = [path.relative_to(root).as_posix() for path in root.rglob("*")
                 if path.is_file() and not path.relative_to(root).parts[0].startswith("build")
                 and "__pycache__" not in path.parts and path.name != "PKG-INFO"]
    else:
        raise RuntimeError(f"attnjit: {root} is neither a git checkout nor an unpacked sdist; "
                           "no list of its source files")
    return sorted(names)


def write_sdist(sdist_directory, root=ROOT):
    """Writes attnjit-<version>.tar.gz (the source files and PKG-INFO); returns its name."""
    version = project_version(root)
    top = f"{NAME}-{version}"
    filename = f"{top}.tar.gz"
    target = Path(sdist_directory) / filename
    partial = target.with_name(target.name + ".part")

    def add(archive, name, data, mode):
        info = tarfile.TarInfo(f"{top}/{name}")
        info.size, info.mode, info.mtime = len(data), mode, EPOCH
        archive.addfile(info, io.BytesIO(data))

    with open(partial, "wb") as raw:
        # No file name and a fixed time in the gzip header: the archive is reproducible.
        with gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=EPOCH) as compressed:
            with tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive:
                for name in sdist_files(root):
                    path = root / name
                    add(archive, name, path.read_bytes(),
                        0o755 if os.access(path, os.X_OK) else 0o644)
                add(archive, "PKG-INFO", metadata_text(version).encode(), 0o644)
    partial.replace(target)
    return filename


# The PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = project_version()
    dist_info = Path(metadata_directory) / dist_info_name(version)
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(metadata_text(version))
    (dist_info / "WHEEL").write_text(wheel_text())
    return dist_info.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return write_wheel(wheel_directory, build_library())


def build_sdist(sdist_directory, config_settings=None):
    return write_sdist(sdist_directory)
