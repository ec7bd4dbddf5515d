#!/usr/bin/env python3
"""Lists the include cycles between liblog's units.

A unit is a file stem: liblog/src/X.h, liblog/src/X.cc and
liblog/include/mq/X.h are unit X. Unit A depends on unit B when a file of A
has `#include "B.h"` or `#include "mq/B.h"`. A cycle is a strongly connected
set of two or more units (implementation level: a .cc counts as well as its
header). Prints each cycle and exits 1 when there is one; with -v also prints
every unit's dependencies.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "liblog")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def unit_of(path):
    return os.path.splitext(os.path.basename(path))[0]


def graph():
    deps = {}
    for sub in ("src", os.path.join("include", "mq")):
        top = os.path.join(ROOT, sub)
        paths = sorted(os.path.join(d, n) for d, _, names in os.walk(top) for n in names)
        for path in paths:
            name = os.path.basename(path)
            if not name.endswith((".h", ".cc")):
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            u = unit_of(name)
            deps.setdefault(u, set())
            for inc in INCLUDE.findall(text):
                v = unit_of(inc)
                if v != u:
                    deps[u].add(v)
    return deps


def cycles(deps):
    # Tarjan's strongly connected components.
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in deps:
                continue
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def main():
    deps = graph()
    if "-v" in sys.argv:
        for u in sorted(deps):
            print(f"{u}: {' '.join(sorted(deps[u]))}")
    found = cycles(deps)
    for comp in found:
        edges = [f"{a} -> {b}" for a in comp for b in sorted(deps[a]) if b in comp]
        print("cycle: " + ", ".join(comp) + "  (" + "; ".join(edges) + ")")
    if not found:
        print("no include cycles between liblog units")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
