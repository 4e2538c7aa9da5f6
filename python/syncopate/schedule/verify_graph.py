"""Graph algorithms of the verifier over the chunk dependency graph: an execution order, and
a report of the cycles that prevent one.

:func:`topological` orders chunks along happens-before and program-order edges (lowest step
first among the ready chunks); when it cannot order them all, :func:`cycle_problems` names
one shortest cycle per strongly connected component and why each of its edges exists.  Plain
graph code on chunk ids, split from :mod:`.verify` to keep that module about the ordering
semantics and the symbolic execution.
"""

from __future__ import annotations

import heapq
from collections import deque

__all__ = ["topological", "cycle_problems"]


def topological(chunks, succ) -> list[int]:
    """Chunk ids in an order compatible with ``succ`` (lowest step first among the ready);
    shorter than ``chunks`` when ``succ`` has a cycle."""
    indeg = {cid: 0 for cid in chunks}
    for ss in succ.values():
        for b in ss:
            indeg[b] += 1
    heap = [(chunks[cid].step, cid) for cid, n in indeg.items() if n == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, cid = heapq.heappop(heap)
        order.append(cid)
        for b in succ.get(cid, ()):
            indeg[b] -= 1
            if indeg[b] == 0:
                heapq.heappush(heap, (chunks[b].step, b))
    return order


def cycle_problems(chunks, succ, remaining: set[int], edge_reason) -> list[str]:
    """One message per strongly connected component of the unorderable chunks, naming a cycle
    and why each of its edges exists."""
    # Tarjan's algorithm, iterative, on the subgraph of remaining nodes.
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    sccs: list[list[int]] = []
    counter = 0
    for root in sorted(remaining):
        if root in index:
            continue
        work = [(root, iter(sorted(b for b in succ[root] if b in remaining)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(b for b in succ[w] if b in remaining))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))
    problems = []
    for comp in sccs:
        members = set(comp)
        # Shortest cycle through the smallest member: BFS back to it inside the component.
        start = comp[0]
        prev = {start: None}
        queue = deque([start])
        found = None
        while found is None:  # the component is strongly connected: a cycle exists
            v = queue.popleft()
            for w in sorted(succ[v]):
                if w == start:
                    found = v
                    break
                if w in members and w not in prev:
                    prev[w] = v
                    queue.append(w)
        path = [found]
        while path[-1] != start:
            path.append(prev[path[-1]])
        path.reverse()  # start ... found, then back to start
        cycle = path + [start]
        text = " -> ".join(f"chunk {x}" for x in cycle)
        reasons = "; ".join(edge_reason.get((a, b), f"chunk {a} precedes chunk {b}")
                            for a, b in zip(cycle, cycle[1:]))
        c0 = chunks[start]
        problems.append(
            f"{c0.describe()}: dependency cycle {text} ({reasons}); no order can run these "
            f"chunks: remove one of these after entries or change the steps so that they agree")
    return problems
