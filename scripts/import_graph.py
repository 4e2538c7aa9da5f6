#!/usr/bin/env python3
"""The project's import graph: strongly connected components (import cycles) among its modules.

``scripts/import_graph.py`` prints the cycles of the module-level graph (what runs at import
time) and of the graph with every import, function-local ones included (what a reader must keep
in mind: a cycle held apart only by a function-local import is still a cycle of the design).
Importing ``a.b.c`` counts as importing ``a`` and ``a.b`` too (their ``__init__`` runs).
``tests/test_import_graph.py`` asserts the module-level graph is acyclic. Exit 1 if it is not.
"""
import ast
import os
import sys
from collections import defaultdict
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOTS = {"python/syncopate": "syncopate", "syncopate_mlir": "syncopate_mlir", "passes": "syncopate_mlir.passes"}
mods = {}
for d, pkg in ROOTS.items():
    base = os.path.join(ROOT, d)
    for dp, dn, fn in os.walk(base):
        if d == "syncopate_mlir" and "passes" in dp: continue
        for f in fn:
            if not f.endswith(".py"): continue
            rel = os.path.relpath(os.path.join(dp, f), base)[:-3].replace(os.sep, ".")
            name = pkg if rel == "__init__" else pkg + "." + (rel[:-9] if rel.endswith(".__init__") else rel)
            mods[name] = os.path.join(dp, f)
def resolve(mod, node):
    is_pkg = mods[mod].endswith("__init__.py")
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = mod.split(".")
            base = parts if is_pkg else parts[:-1]
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module
        out = []
        for a in node.names:
            cand = target + "." + a.name
            out.append(cand if cand in mods else target)
        return out
    return [a.name for a in node.names]
def graph(all_levels):
    g = defaultdict(set)
    for m, path in mods.items():
        tree = ast.parse(open(path).read())
        nodes = ast.walk(tree) if all_levels else tree.body
        for n in nodes:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                for t in resolve(m, n):
                    while t and t not in mods and "." in t: t = t.rsplit(".", 1)[0]
                    if t in mods and t != m: g[m].add(t)
                    # importing a.b.c runs a/__init__ and a/b/__init__ first
                    parts = t.split(".")
                    for k in range(1, len(parts)):
                        p = ".".join(parts[:k])
                        if p in mods and p != m and not m.startswith(p + "."): g[m].add(p)
    return g
def sccs(g):
    index, low, st, on, out, c = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        index[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in g.get(v, ()):
            if w not in index: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                x = st.pop(); on.discard(x); comp.append(x)
                if x == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in mods:
        if v not in index: sc(v)
    return out
def main() -> int:
    bad = 0
    for lvl in (False, True):
        cs = sccs(graph(lvl))
        print(("every import" if lvl else "module-level imports") + f": {len(cs)} cycle(s)")
        for comp in cs:
            print(f"  {len(comp)} modules: {', '.join(comp)}")
        if not lvl:
            bad = len(cs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
