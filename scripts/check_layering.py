#!/usr/bin/env python3
"""Checks Ember's floors from the #include lines of the library's own files.

    core  <-  {data, optim}  <-  layers  <-  distribute  <-  apps, ember.h

A file may include files of its own folder and of the floors below it, never above; data and
optim do not include each other. Library files (core, data, optim, layers, distribute, ember.h)
include Ember's files by paths relative to themselves that exist, so no folder on a consumer's
include path can stand in for one. The public headers the folders list (PUBLIC_HEADERS in each
<folder>/sources.cmake), with ember.h, are exactly ember.h and what it reaches. The one exception to the
floors is ember_cuda.cpp, which assembles the CUDA module from every folder's op table.

Usage: scripts/check_layering.py   (from anywhere; exit 0 clean, 1 with one line per violation)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FLOOR = {"core": 0, "data": 1, "optim": 1, "layers": 2, "distribute": 3, "apps": 4, "ember.h": 4}
LIBRARY = ("core", "data", "optim", "layers", "distribute")
ASSEMBLER = "ember_cuda.cpp"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def owner(path):
    """The floor a repository path belongs to, or None (tests, bench, examples, ...)."""
    top = path.split("/", 1)[0]
    return top if top in FLOOR else None


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    for m in INCLUDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        yield line, m.group(1)


def main():
    files = subprocess.check_output(["git", "ls-files", "--cached", "--others", "--exclude-standard", *LIBRARY, "apps", "ember.h", ASSEMBLER],
                                    cwd=ROOT, text=True).split()
    files = [f for f in files if f.endswith(SOURCE) and os.path.exists(os.path.join(ROOT, f))]
    problems = []
    edges = 0
    for f in files:
        src = owner(f)
        for line, inc in includes(f):
            here = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            if src in LIBRARY or f == "ember.h" or f == ASSEMBLER:
                if not os.path.exists(os.path.join(ROOT, here)):
                    problems.append(f"{f}:{line}: \"{inc}\" is not a path relative to this file "
                                    "(a consumer's own folder could stand in for it)")
                    continue
                target = here
            else:  # apps: the source root is on their include path
                target = here if os.path.exists(os.path.join(ROOT, here)) else os.path.normpath(inc)
                if not os.path.exists(os.path.join(ROOT, target)):
                    continue  # a system or third-party header
            dst = owner(target)
            if dst is None:
                if src in LIBRARY:
                    problems.append(f"{f}:{line}: the library includes {target}, outside its folders")
                continue
            edges += 1
            if f == ASSEMBLER:
                continue
            if FLOOR[dst] > FLOOR[src]:
                problems.append(f"{f}:{line}: {src} includes {target}, a floor above it ({dst})")
            elif {src, dst} == {"data", "optim"}:
                problems.append(f"{f}:{line}: {src} includes {target}: data and optim do not include each other")

    # The installed headers are exactly ember.h's closure.
    closure, stack = set(), ["ember.h"]
    while stack:
        h = stack.pop()
        if h in closure:
            continue
        closure.add(h)
        for _, inc in includes(h):
            t = os.path.normpath(os.path.join(os.path.dirname(h), inc))
            if os.path.exists(os.path.join(ROOT, t)):
                stack.append(t)
    # Each folder lists its public headers in <folder>/sources.cmake (ember_folder(... PUBLIC_HEADERS ...)).
    listed = {"ember.h"}
    for folder in LIBRARY:
        path = os.path.join(ROOT, folder, "sources.cmake")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for m in re.finditer(r"PUBLIC_HEADERS(.*?)(?:\bSOURCES\b|\bCUDA_SOURCES\b|\))", f.read(), re.S):
                listed |= {folder + "/" + h for h in m.group(1).split()}
    for h in sorted(closure - listed):
        problems.append(f"{h}: reached from ember.h but not in its folder's PUBLIC_HEADERS (it would not be installed)")
    for h in sorted(listed - closure):
        problems.append(f"{h}: in PUBLIC_HEADERS but not reached from ember.h (a private header installed)")

    for p in problems:
        print("check_layering: " + p)
    print(f"check_layering: {len(files)} files, {edges} includes between Ember's folders, "
          f"{len(closure)} public headers, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
