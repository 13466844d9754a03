"""tools/python/build_backend.py, the package's PEP 517 backend, without CMake: the wheel it
writes around a given library (names, tag, metadata, RECORD hashes), the prepared metadata,
the choice of the CMake build tree, and the sdist's file list. Needs neither the library nor a
GPU. tools/python/install_test.sh installs a real wheel through pip.
"""

import base64
import csv
import hashlib
import io
import re
import sys
import tarfile
import tempfile
import unittest
import zipfile
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parents[1]
sys.path.insert(0, str(PYTHON_DIR))

import build_backend  # noqa: E402

VERSION = re.search(r"project\(attnjit VERSION ([0-9.]+)",
                    (REPO / "CMakeLists.txt").read_text()).group(1)


class WheelTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory()
        self.addCleanup(self.work.cleanup)
        self.dir = Path(self.work.name)
        library = self.dir / "libattnjit.so"
        library.write_bytes(b"\x7fELF not really a library")
        self.name = build_backend.write_wheel(self.dir, library)
        self.wheel = zipfile.ZipFile(self.dir / self.name)
        self.addCleanup(self.wheel.close)

    def test_the_name_carries_the_cmake_version_and_a_platform_tag(self):
        self.assertEqual(self.name, f"attnjit-{VERSION}-py3-none-"
                                    f"{build_backend.platform_tag()}.whl")
        self.assertNotEqual(build_backend.platform_tag(), "any")

    def test_it_holds_the_package_the_library_and_the_dist_info(self):
        names = set(self.wheel.namelist())
        sources = {f"attnjit/{path.name}" for path in (PYTHON_DIR / "attnjit").glob("*.py")}
        self.assertTrue(sources, "no package sources found")
        self.assertLessEqual(sources, names)
        dist_info = f"attnjit-{VERSION}.dist-info"
        self.assertLessEqual({"attnjit/libattnjit.so", f"{dist_info}/METADATA",
                              f"{dist_info}/WHEEL", f"{dist_info}/RECORD"}, names)
        self.assertFalse([name for name in names if "__pycache__" in name or
                          name.endswith(".pyc")])
        library = self.wheel.getinfo("attnjit/libattnjit.so")
        self.assertEqual((library.external_attr >> 16) & 0o777, 0o755)

    def test_wheel_and_metadata(self):
        dist_info = f"attnjit-{VERSION}.dist-info"
        wheel = self.wheel.read(f"{dist_info}/WHEEL").decode()
        self.assertIn("Root-Is-Purelib: false\n", wheel)
        self.assertIn(f"Tag: py3-none-{build_backend.platform_tag()}\n", wheel)
        metadata = self.wheel.read(f"{dist_info}/METADATA").decode()
        for line in ("Metadata-Version: 2.1", "Name: attnjit", f"Version: {VERSION}",
                     "Requires-Python: >=3.9"):
            self.assertIn(line + "\n", metadata)

    def test_record_lists_every_file_with_its_sha256_and_size(self):
        dist_info = f"attnjit-{VERSION}.dist-info"
        rows = list(csv.reader(io.StringIO(self.wheel.read(f"{dist_info}/RECORD").decode())))
        listed = {row[0] for row in rows}
        self.assertEqual(listed, set(self.wheel.namelist()))
        for name, digest, size in rows:
            if name == f"{dist_info}/RECORD":
                self.assertEqual((digest, size), ("", ""))
                continue
            data = self.wheel.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            self.assertEqual(digest, "sha256=" + expected.decode(), name)
            self.assertEqual(int(size), len(data), name)

    def test_the_same_inputs_give_the_same_bytes(self):
        first = (self.dir / self.name).read_bytes()
        again = Path(self.work.name) / "again"
        again.mkdir()
        build_backend.write_wheel(again, self.dir / "libattnjit.so")
        self.assertEqual((again / self.name).read_bytes(), first)


class HooksTest(unittest.TestCase):
    def test_nothing_is_required_from_an_index(self):
        self.assertEqual(build_backend.get_requires_for_build_wheel(), [])
        self.assertEqual(build_backend.get_requires_for_build_sdist(), [])

    def test_prepared_metadata_is_the_wheels(self):
        with tempfile.TemporaryDirectory() as work:
            name = build_backend.prepare_metadata_for_build_wheel(work)
            self.assertEqual(name, f"attnjit-{VERSION}.dist-info")
            self.assertEqual((Path(work) / name / "METADATA").read_text(),
                             build_backend.metadata_text(VERSION))


class BuildTreeTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory()
        self.addCleanup(self.work.cleanup)
        self.root = Path(self.work.name).resolve()

    def configure(self, source):
        (self.root / "build").mkdir()
        (self.root / "build/CMakeCache.txt").write_text(
            f"CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_HOME_DIRECTORY:INTERNAL={source}\n")

    def test_without_build_a_private_tree(self):
        self.assertEqual(build_backend.build_tree(self.root, {}),
                         self.root / "build/python/cmake")

    def test_a_configured_build_of_this_tree_is_reused(self):
        self.configure(self.root)
        self.assertEqual(build_backend.build_tree(self.root, {}), self.root / "build")

    def test_a_build_of_another_tree_is_not(self):
        self.configure("/elsewhere/attnjit")
        self.assertEqual(build_backend.build_tree(self.root, {}),
                         self.root / "build/python/cmake")

    def test_the_variable_wins_relative_to_the_source_tree(self):
        self.configure(self.root)
        environ = {"ATTNJIT_CMAKE_BUILD_DIR": "build-debug"}
        self.assertEqual(build_backend.build_tree(self.root, environ), self.root / "build-debug")
        environ = {"ATTNJIT_CMAKE_BUILD_DIR": "/tmp/attnjit-build"}
        self.assertEqual(build_backend.build_tree(self.root, environ),
                         Path("/tmp/attnjit-build").resolve())


@unittest.skipUnless((REPO / ".git").exists(), "not a git checkout")
class SdistTest(unittest.TestCase):
    def test_it_holds_the_tracked_sources_and_pkg_info(self):
        with tempfile.TemporaryDirectory() as work:
            name = build_backend.build_sdist(work)
            self.assertEqual(name, f"attnjit-{VERSION}.tar.gz")
            with tarfile.open(Path(work) / name) as archive:
                names = set(archive.getnames())
                pkg_info = archive.extractfile(f"attnjit-{VERSION}/PKG-INFO").read().decode()
        top = f"attnjit-{VERSION}/"
        for needed in ("pyproject.toml", "CMakeLists.txt", "tools/python/build_backend.py",
                       "tools/python/attnjit/__init__.py", "include/attnjit/attnjit.h"):
            self.assertTrue(top + needed in names, f"{needed} is not in the sdist")
        self.assertFalse([name for name in names if name.startswith(top + "build/")])
        self.assertEqual(pkg_info, build_backend.metadata_text(VERSION))


if __name__ == "__main__":
    unittest.main()
