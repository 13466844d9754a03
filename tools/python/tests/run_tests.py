"""Runs the Python binding's tests and exits the way ctest reads: 0 when every test ran and
passed, 1 when one failed or errored or when none ran, 77 (the SKIP_RETURN_CODE of the ctest
entries) when some were skipped and none failed. So a GPU test class that skips for want of
PyTorch or a device makes its entry report "skipped", never "Passed".

    python3 tools/python/tests/run_tests.py --cpu   # test_*.py but not *_gpu.py
    python3 tools/python/tests/run_tests.py --gpu   # test_*_gpu.py
    ... --installed: test the attnjit package installed in this interpreter (it is imported
    before the test files put the source tree on sys.path, so they all use it)
"""

import argparse
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIPPED = 77


def select(suite, keep):
    """The tests of `suite` (nested suites flattened) whose module name passes `keep`."""
    selected = unittest.TestSuite()
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            selected.addTests(select(test, keep))
        elif keep(type(test).__module__):
            selected.addTest(test)
    return selected


def exit_code(result):
    if not result.wasSuccessful() or result.testsRun == 0:
        return 1
    return SKIPPED if result.skipped else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cpu", action="store_true", help="the tests that need no GPU")
    group.add_argument("--gpu", action="store_true", help="the *_gpu.py tests")
    parser.add_argument("--installed", action="store_true",
                        help="test the installed attnjit package, not the source tree's")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.installed:
        import attnjit

        where = Path(attnjit.__file__).resolve().parent
        if HERE.parent in where.parents or where.parent == HERE.parent:
            print(f"run_tests: --installed, but attnjit comes from the source tree ({where})")
            return 1
        print(f"run_tests: attnjit {attnjit.version()} from {where}")
    suite = unittest.defaultTestLoader.discover(str(HERE), pattern="test_*.py",
                                                top_level_dir=str(HERE))
    wants_gpu = args.gpu
    tests = select(suite, lambda module: module.endswith("_gpu") == wants_gpu
                   or module.startswith("unittest.loader"))  # import failures stay failures
    result = unittest.TextTestRunner(verbosity=2 if args.verbose else 1).run(tests)
    code = exit_code(result)
    if code == SKIPPED:
        reasons = sorted({reason for _, reason in result.skipped})
        print(f"run_tests: {len(result.skipped)} skipped ({'; '.join(reasons)}), none "
              f"failed; exit {SKIPPED} (skipped)")
    return code


if __name__ == "__main__":
    sys.exit(main())
