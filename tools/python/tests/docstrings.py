"""The examples in the docstrings of the attnjit package, as doctest finds them, split by the
`# doctest: +GPU` mark: an example so marked needs PyTorch and a CUDA device (and may use the
tensors q, k and v of the package's docstring); every other example runs anywhere, with
neither. Examples may use the name `attnjit` without importing it. test_docstrings.py runs the
unmarked examples, test_docstrings_gpu.py the docstrings that hold marked ones.
"""

import doctest
import io
import pkgutil
import sys

import attnjit

GPU = doctest.register_optionflag("GPU")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def modules():
    """The package and each of its modules that importing it loaded (not _ops without PyTorch:
    importing it here would hide the package's `_ops = None`)."""
    found = [attnjit]
    for info in pkgutil.iter_modules(attnjit.__path__):
        module = sys.modules.get(f"attnjit.{info.name}")
        if module is not None:
            found.append(module)
    return found


def docstring_tests():
    """Every docstring of the package with examples, as a doctest.DocTest."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for module in modules():
        for test in finder.find(module, module.__name__, extraglobs={"attnjit": attnjit}):
            if test.examples:
                tests.append(test)
    return tests


def needs_gpu(example):
    return bool(example.options.get(GPU))


def run(test, globs=None):
    """Runs `test`'s examples; returns the failure report ("" when every example passed)."""
    if globs:
        test.globs.update(globs)
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=out.write, clear_globs=True)
    return out.getvalue() if result.failed else ""
