"""Tests of kernel_identity.py: argument checks, PTX module splitting, the cubin's code
sections, the comparison's verdicts; with ptxas present, a small kernel assembled and found.

Run: python3 -m unittest discover -s tools/bench/tests
"""

import contextlib
import io
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import kernel_identity  # noqa: E402
from support import refusal  # noqa: E402

TWO_MODULES = """//
// header comment
//
.version 9.0
.target sm_90a
.address_size 64
.visible .entry first_kernel(
\t.param .u64 p
)
{
\tret;
}
.version 9.0
.target sm_90a
.address_size 64
.visible .entry second_kernel()
{
\tret;
}
"""


def elf_with_sections(sections):
    """A minimal 64-bit little-endian ELF holding `sections` ({name: bytes}) and .shstrtab."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name in sections) + b".shstrtab\0"
    body = b"".join(sections.values())
    header_size, entry_size = 64, 64
    data_at = header_size
    names_at = data_at + len(body)
    table_at = names_at + len(names)
    entries = [bytes(entry_size)]  # the null section
    offset, name_offset = data_at, 1
    for name, content in sections.items():
        entries.append(struct.pack("<IIQQQQIIQQ", name_offset, 1, 6, 0, offset, len(content),
                                   0, 0, 16, 0))
        offset += len(content)
        name_offset += len(name) + 1
    entries.append(struct.pack("<IIQQQQIIQQ", name_offset, 3, 0, 0, names_at, len(names),
                               0, 0, 1, 0))
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, table_at, 0, header_size,
                                 0, 0, entry_size, len(entries), len(entries) - 1)
    return header + body + names + b"".join(entries)


class ArgumentTest(unittest.TestCase):
    def refused(self, argv):
        return refusal(kernel_identity.parse_args, argv)

    def test_virtual_architecture_is_refused(self):
        message = self.refused(["--a", sys.executable, "--b", sys.executable, "--spec", "x",
                                "--arch", "compute_90a"])
        self.assertIn("--arch: got 'compute_90a'", message)

    def test_missing_attnc_is_refused(self):
        message = self.refused(["--a", "/nonexistent/attnc", "--b", sys.executable, "--spec",
                                "x"])
        self.assertIn("--a: '/nonexistent/attnc' is not an executable attnc", message)

    def test_a_spec_is_required(self):
        self.refused(["--a", sys.executable, "--b", sys.executable])


class PtxTest(unittest.TestCase):
    def test_modules_start_at_version_lines(self):
        modules = kernel_identity.split_modules(TWO_MODULES)
        self.assertEqual(len(modules), 2)
        self.assertTrue(all(module.startswith(".version") for module in modules))
        self.assertEqual(kernel_identity.entry_names(modules[0]), ["first_kernel"])
        self.assertEqual(kernel_identity.entry_names(modules[1]), ["second_kernel"])


class CodeSectionTest(unittest.TestCase):
    def test_text_sections_by_kernel(self):
        elf = elf_with_sections({".text.k1": b"A" * 32, ".nv.info": b"x" * 8,
                                 ".text.k2": b"B" * 16})
        self.assertEqual(kernel_identity.code_sections(elf), {"k1": b"A" * 32, "k2": b"B" * 16})

    def test_not_an_elf(self):
        with self.assertRaises(ValueError):
            kernel_identity.code_sections(b"not an elf at all, just bytes" * 4)


class CompareTest(unittest.TestCase):
    def test_verdicts(self):
        a = {"same": b"x" * 32, "changed": b"a" * 48, "gone": b"z" * 16}
        b = {"same": b"x" * 32, "changed": b"a" * 16 + b"b" * 16 + b"a" * 32, "new": b"y" * 16}
        rows = {kernel: (size_a, size_b, verdict)
                for kernel, size_a, size_b, verdict in kernel_identity.compare(a, b)}
        self.assertEqual(rows["same"], (32, 32, "identical"))
        self.assertEqual(rows["changed"], (48, 64, "differs (2 of 4 instructions)"))
        self.assertEqual(rows["gone"], (16, 0, "only in a"))
        self.assertEqual(rows["new"], (0, 16, "only in b"))


class FailureTest(unittest.TestCase):
    def test_a_build_that_cannot_emit_is_reported(self):
        with tempfile.TemporaryDirectory() as scratch:
            fake = Path(scratch) / "attnc"
            fake.write_text("#!/bin/sh\necho 'attnc: mask: got bogus' >&2\nexit 1\n")
            fake.chmod(0o755)
            stderr, stdout = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
                code = kernel_identity.main(["--a", str(fake), "--b", str(fake), "--spec",
                                             "mask=bogus", "--ptxas", sys.executable])
        self.assertEqual(code, 2)
        self.assertIn("emit failed for 'mask=bogus': attnc: mask: got bogus", stderr.getvalue())


def ptxas_or_none():
    try:
        return kernel_identity.find_ptxas(None)
    except SystemExit:
        return None


@unittest.skipIf(ptxas_or_none() is None, "no ptxas")
class PtxasTest(unittest.TestCase):
    def test_an_assembled_kernel_has_its_code_section(self):
        module = kernel_identity.split_modules(TWO_MODULES)[1]
        with tempfile.TemporaryDirectory() as scratch:
            ptx, cubin = Path(scratch) / "m.ptx", Path(scratch) / "m.cubin"
            ptx.write_text(module)
            subprocess.run([ptxas_or_none(), "-arch=sm_90a", str(ptx), "-o", str(cubin)],
                           check=True, capture_output=True)
            code = kernel_identity.code_sections(cubin.read_bytes())
        self.assertIn("second_kernel", code)
        self.assertEqual(len(code["second_kernel"]) % 16, 0)
        self.assertGreater(len(code["second_kernel"]), 0)


if __name__ == "__main__":
    unittest.main()
