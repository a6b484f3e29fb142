#!/usr/bin/env python3
"""Layers that only look down: fail on a circle in src/ and its subdirectories.

usage: check-layers.py SRCDIR [BUILDDIR]

The analyzer's files are SRCDIR/*.[ch] and those of every subdirectory of
SRCDIR (cli/, html/, ...) but recorder/, a program of its own.  Without a
build directory: their include graph must have no cycle, and no file
outside SRCDIR/cli (the library) may include a header of SRCDIR/cli (the
command line).

With BUILDDIR (a meson build of commdebug): the call graph too.  Each
object file of those sources is a node; A -> B when A uses a symbol B
defines (nm).  A cycle between two .c files fails, and so does a library
file that calls into the command line.
"""
import os
import re
import subprocess
import sys


def subdirs(src):
    """"" and every directory below src, at any depth, but recorder/ (another
    program)."""
    out = [""]
    for d, dirs, _ in os.walk(src):
        dirs[:] = sorted(x for x in dirs if x != "recorder")
        out += [os.path.relpath(os.path.join(d, x), src) for x in dirs]
    return out


def includes(src):
    graph = {}
    for sub in subdirs(src):
        d = os.path.join(src, sub)
        for name in sorted(os.listdir(d)):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.normpath(os.path.join(d, name))
            with open(path, encoding="utf-8") as f:
                text = f.read()
            deps = set()
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                target = os.path.normpath(os.path.join(d, inc))
                if os.path.exists(target):
                    deps.add(target)
            graph[path] = deps
    return graph


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def objects(src, build):
    """Object file -> source name (src/x.c, src/cli/y.c, src/views/html/z.c):
    meson names the object of src/views/html/page.c src_views_html_page.c.o."""
    names = {}
    for sub in subdirs(src):
        for f in os.listdir(os.path.join(src, sub)):
            if f.endswith(".c"):
                rel = "/".join(p for p in ("src", sub, f) if p)
                names[rel.replace("/", "_") + ".o"] = rel
    objs = {}
    for root, _, files in os.walk(build):
        for f in files:
            if f in names and (root.endswith("commdebug.p") or
                               root.endswith("libcommdebug-core.a.p")):
                objs[os.path.join(root, f)] = names[f]
    return objs


def calls(src, build):
    defined, used = {}, {}
    for obj, name in objects(src, build).items():
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                defined[parts[2]] = name
            elif len(parts) == 2 and parts[0] == "U":
                used.setdefault(name, set()).add(parts[1])
        used.setdefault(name, set())
    graph = {}
    for name, syms in used.items():
        graph[name] = {defined[s] for s in syms if s in defined and defined[s] != name}
    return graph


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src = sys.argv[1]
    fail = 0
    graph = includes(src)
    for comp in cycles(graph):
        print("FAIL include cycle: " + " -> ".join(comp))
        fail += 1
    cli = os.path.normpath(os.path.join(src, "cli")) + os.sep
    for f, deps in sorted(graph.items()):
        if f.startswith(cli):
            continue
        for d in sorted(deps):
            if d.startswith(cli):
                print(f"FAIL {f} includes {d}: the library does not know the command line")
                fail += 1
    checked = len(graph)
    if len(sys.argv) == 3:
        cg = calls(src, sys.argv[2])
        if not cg:
            print(f"FAIL no object files of src/ under {sys.argv[2]}")
            return 1
        for comp in cycles(cg):
            print("FAIL call cycle: " + " <-> ".join(comp))
            fail += 1
        for f, deps in sorted(cg.items()):
            if not f.startswith("src/cli/"):
                for d in sorted(deps):
                    if d.startswith("src/cli/"):
                        print(f"FAIL {f} calls into {d}")
                        fail += 1
        checked += len(cg)
    print(f"{checked} files checked, {fail} failed")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
