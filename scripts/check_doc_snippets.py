#!/usr/bin/env python3
"""Compiles every ```cpp block of the given Markdown files against an installed Ember.

    scripts/check_doc_snippets.py INCLUDE_DIR FILE.md [FILE.md ...]

INCLUDE_DIR is the installed package's include folder (the one holding ember/ember.h). Each
block is wrapped before it is compiled:
  - a block that contains `int main` is compiled as it is (it includes what it needs);
  - a block whose first line is the comment `// file scope` (class definitions, functions) is
    compiled after `#include <ember/ember.h>` and `using namespace ember;`;
  - any other block is a sequence of statements and goes inside `int main() { ... }` after the
    same two lines.
Blocks meant as pseudo-code are fenced as ```text and are not compiled. A block indented inside
a list item is dedented first.

Each wrapped block is checked with `c++ -std=c++20 -fsyntax-only -Wall -Werror` (unused
variables allowed: snippets declare things for show). Environment: CXX picks the compiler
(default c++). Prints one line per block, and for a failing one its file:line and the compiler's
first errors. Exit status: 0 when every block compiles, 1 when one does not, 2 on a usage error.
"""
import os
import re
import subprocess
import sys
import tempfile
import textwrap

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
PRELUDE = "#include <ember/ember.h>\nusing namespace ember;\n"
FLAGS = ["-std=c++20", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-variable",
         "-Wno-unused-but-set-variable"]


def blocks(path):
    """Yields (the opening fence's line number, language, code) for every fenced block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        start = i + 1
        j = start
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}:{i + 1}: a code fence that is never closed")
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[start:j])
        yield i + 1, lang, textwrap.dedent(body)
        i = j + 1


def wrap(code, path, fence_line):
    """The block as a translation unit; #line makes the compiler name the Markdown file's lines."""
    here = f'#line {fence_line + 1} "{path}"\n'
    if re.search(r"\bint\s+main\s*\(", code):
        return here + code + "\n"
    first = code.lstrip().split("\n", 1)[0].strip()
    if first.lower().startswith("// file scope"):
        return PRELUDE + here + code + "\n"
    return PRELUDE + "int main() {\n" + here + code + "\n}\n"


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
        return 2
    include, files = argv[1], argv[2:]
    if not os.path.isfile(os.path.join(include, "ember", "ember.h")):
        print(f"check_doc_snippets: no ember/ember.h under {include}", file=sys.stderr)
        return 2
    cxx = os.environ.get("CXX", "c++")
    total = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            for line, lang, code in blocks(path):
                if lang != "cpp":
                    continue
                total += 1
                src = os.path.join(tmp, f"snippet_{total}.cpp")
                with open(src, "w", encoding="utf-8") as f:
                    f.write(wrap(code, path, line))
                r = subprocess.run([cxx, *FLAGS, "-I" + include, src], capture_output=True, text=True)
                if r.returncode == 0:
                    print(f"ok    {path}:{line}")
                    continue
                failed += 1
                print(f"FAIL  {path}:{line}")
                errors = [l for l in r.stderr.splitlines() if "error" in l]
                for l in (errors or r.stderr.splitlines())[:8]:
                    print("      " + l.replace(src, "snippet"))
    print(f"check_doc_snippets: {total - failed} of {total} blocks compile"
          + ("" if failed == 0 else f", {failed} fail"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
