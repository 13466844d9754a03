#!/usr/bin/env python3
"""Runs the code blocks of README.md and docs/*.md that are marked for testing, and checks
that every relative link in them resolves. Exits 1 when a block fails or a link is broken.

A fenced block is tested when its info string holds the word `docs-test`:

    ```sh docs-test              run with bash (set -euo pipefail); a failing command fails it
    ```python docs-test          run with python3, the attnjit package taken from the build
    ```cpp docs-test file=F      written to F in one project folder per document; when that
    ```cmake docs-test file=CMakeLists.txt   folder has a CMakeLists.txt, the build tree is
                                 installed into a scratch prefix, the project is configured
                                 against it (find_package(attnjit)) and built, and each program
                                 its add_executable() names is run: it must exit 0 (without a
                                 GPU, the examples compile their kernels for an explicit target
                                 and stop before launching)

Blocks run in a scratch folder that mirrors the repository (every top-level entry linked), with
`build` pointing at the build tree, so commands written as `build/tools/attnc ...` run as
written and files they create stay out of the tree. ATTNJIT_CACHE_DIR is a scratch folder too.

    python3 tools/docs_test.py --build build
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARK = "docs-test"
TIMEOUT_S = 600
FENCE = re.compile(r"^(```+|~~~+)(.*)$")
EXECUTABLE = re.compile(r"^\s*add_executable\(\s*([\w.-]+)", re.M)
LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


class Block:
    def __init__(self, doc, line, language, options, text):
        self.doc = doc
        self.line = line
        self.language = language
        self.options = options
        self.text = text

    @property
    def where(self):
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def documents():
    """README.md and every .md under docs/, in a stable order."""
    return [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))


def code_blocks(path):
    """Every fenced block of `path`: (first line number, info string, text)."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, info = opening.group(1), opening.group(2).strip()
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            body.append(lines[j])
            j += 1
        blocks.append((i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def tested_blocks(path):
    out = []
    for line, info, text in code_blocks(path):
        words = info.split()
        if MARK not in words:
            continue
        options = dict(word.split("=", 1) for word in words if "=" in word)
        out.append(Block(path, line, words[0] if words else "", options, text))
    return out


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found = set()
    counts = {}
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(path):
    """Relative links of `path` whose file or anchor does not exist."""
    problems = []
    text = path.read_text(encoding="utf-8")
    # Links inside code blocks and inline code are not links.
    text = re.sub(r"^(```+|~~~+).*?^\1\s*$", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{path.relative_to(REPO)}: link to {target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{path.relative_to(REPO)}: link to {target}: no such heading")
    return problems


def scratch_tree(root, build):
    """A folder whose top-level entries link to the repository's, with `build` -> the build."""
    tree = root / "tree"
    tree.mkdir()
    for entry in REPO.iterdir():
        if entry.name in (".git", "build"):
            continue
        (tree / entry.name).symlink_to(entry)
    (tree / "build").symlink_to(build)
    return tree


def run(command, cwd, env, stdin_text=None):
    try:
        done = subprocess.run(command, cwd=cwd, env=env, input=stdin_text, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        return 124, f"timed out after {TIMEOUT_S} s\n{error.stdout or ''}"
    return done.returncode, done.stdout


class Runner:
    def __init__(self, root, build):
        self.root = root
        self.build = build
        self.tree = scratch_tree(root, build)
        self.prefix = None
        self.env = dict(os.environ, ATTNJIT_CACHE_DIR=str(root / "cache"),
                        ATTNJIT_LIBRARY=str(build / "libattnjit.so"),
                        PYTHONPATH=os.pathsep.join(
                            [str(self.tree / "tools" / "python")]
                            + [p for p in [os.environ.get("PYTHONPATH")] if p]))

    def shell(self, block):
        return run(["bash", "-euo", "pipefail", "-s"], self.tree, self.env, block.text)

    def python(self, block):
        return run([sys.executable, "-"], self.tree, self.env, block.text)

    def installed(self):
        if self.prefix is None:
            self.prefix = self.root / "prefix"
            code, output = run(["cmake", "--install", str(self.build), "--prefix",
                                str(self.prefix)], self.tree, self.env)
            if code != 0:
                raise RuntimeError(f"cmake --install {self.build} failed:\n{output}")
        return self.prefix

    def project(self, doc, blocks):
        folder = self.root / "projects" / doc.relative_to(REPO).with_suffix("").as_posix()
        folder.mkdir(parents=True)
        for block in blocks:
            (folder / block.options["file"]).write_text(block.text, encoding="utf-8")
        if not (folder / "CMakeLists.txt").exists():
            return 0, "files written (no CMakeLists.txt: not built)"
        configure = ["cmake", "-S", str(folder), "-B", str(folder / "build"),
                     "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={self.installed()}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        code, output = run(configure, self.tree, self.env)
        if code == 0:
            code, more = run(["cmake", "--build", str(folder / "build"), "-j", "2"],
                             self.tree, self.env)
            output += more
        programs = EXECUTABLE.findall((folder / "CMakeLists.txt").read_text(encoding="utf-8"))
        for program in programs if code == 0 else []:
            code, more = run([str(folder / "build" / program)], self.tree, self.env)
            output += f"$ {program}\n{more}"
            if code != 0:
                break
        return code, output


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True, help="the attnjit build tree (attnc, "
                        "libattnjit.so, the static libraries)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    build = Path(args.build).resolve()
    for needed in ("tools/attnc", "libattnjit.so"):
        if not (build / needed).exists():
            parser.error(f"--build: {build / needed} does not exist; build the attnc and "
                         "attnjit_shared targets first")

    failures = [problem for doc in documents() for problem in broken_links(doc)]
    for problem in failures:
        print(f"BROKEN LINK  {problem}")

    root = Path(tempfile.mkdtemp(prefix="attnjit-docs-"))
    runner = Runner(root, build)
    tested = 0
    try:
        for doc in documents():
            blocks = tested_blocks(doc)
            files = [b for b in blocks if "file" in b.options]
            for block in blocks:
                if "file" in block.options:
                    continue
                if block.language in ("sh", "bash", "shell"):
                    code, output = runner.shell(block)
                elif block.language == "python":
                    code, output = runner.python(block)
                else:
                    code, output = 1, f"no way to test a '{block.language}' block without file="
                tested += 1
                status = "ok" if code == 0 else f"FAILED (exit {code})"
                print(f"{status:<6} {block.where} ({block.language})")
                if code != 0:
                    failures.append(block.where)
                    print(output)
            if files:
                try:
                    code, output = runner.project(doc, files)
                except RuntimeError as error:
                    code, output = 1, str(error)
                tested += 1
                where = ", ".join(b.where for b in files)
                status = "ok" if code == 0 else f"FAILED (exit {code})"
                print(f"{status:<6} {where} (project: {', '.join(b.options['file'] for b in files)}"
                      ", built and run)")
                if code != 0:
                    failures.append(where)
                    print(output)
    finally:
        if args.keep:
            print(f"scratch folder kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    if not tested_blocks(REPO / "README.md"):
        failures.append("README.md: no block marked docs-test")
    print(f"{tested} tested blocks, {len(failures)} failures")
    return 1 if failures or tested == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
