"""Snapshot the fused TTIR of the standard ops, to compare two commits (CPU only).

    python scripts/fused_ir_snapshot.py DIR          # writes DIR/<kernel>-<op>-<backend>.ttir
    python scripts/fused_ir_snapshot.py --diff OLD NEW

Run it once per commit (another checkout on PYTHONPATH for the old one); ``--diff`` compares
line by line after dropping source locations and renumbering the ``%argN`` of a kernel whose
ABI gained parameters (the extra ``syn_*`` parameters are listed, everything else must match).
Used for issue 10: at W = 2 the default lowering's kernels are the pre-table ones plus the
(unused) ``syn_table`` parameter.
"""

from __future__ import annotations

import os
import re
import sys


def snapshot(out: str) -> None:
    import triton

    import syncopate
    from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
    from syncopate.schedule import all_gather, reduce_scatter

    triton.knobs.compilation.always_compile = True
    os.makedirs(out, exist_ok=True)
    M, N, K = 8192, 7168, 4096
    for name in ("matmul_tma_persistent_kernel", "matmul_ptr_kernel"):
        kind = "tma" if "tma" in name else "ptr"
        for op in ("ag", "rs"):
            for backend in ("sm", "ce"):
                if op == "ag":
                    cfg = default_config(M, N, K, "bf16", kind)
                    sched = all_gather([M, K], "bf16", 2, split=2,
                                       mode="push" if backend != "ce" else "pull")
                    operand = "a_ptr"
                else:
                    cfg = default_config(M, N // 2, K, "bf16", kind)
                    sched = reduce_scatter([M, N // 2], "bf16", 2, split=2)
                    operand = "c_ptr"
                sig, cx = compile_args(name, "bf16", cfg)
                fc = syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx,
                                       schedule=sched, operand=operand, backend=backend,
                                       comm_programs=8, attrs=compile_attrs(name),
                                       **cfg.options())
                text = re.sub(r"loc\(#loc\d*\)|#loc\d* = .*", "", fc.asm["syncopate"])
                tag = f"{kind}-{op}-{backend}"
                with open(os.path.join(out, f"{tag}.ttir"), "w") as f:
                    f.write(text)
                print(tag, "shared", fc.kernel.metadata.shared, flush=True)


def _params(text: str) -> list[str]:
    head = next(line for line in text.splitlines() if "tt.func public" in line)
    return re.findall(r"(%[\w]+): ([^,{)]+)", head)


def _compare(old: str, new: str, po, pn, skip: tuple[int, ...]) -> int:
    """Differing lines when the new parameters at positions ``skip`` are the added ones."""
    def shifted(m):  # block arguments are numbered in order: later ones move up by the added
        n = int(m.group(1))
        for s in sorted(skip):
            if n >= s:
                n += 1
        return f"%arg{n}"

    renamed = re.sub(r"%arg(\d+)\b", shifted, old)
    ol = [line for line in renamed.splitlines() if "tt.func public" not in line]
    nl = [line for line in new.splitlines() if "tt.func public" not in line]
    return sum(a != b for a, b in zip(ol, nl)) + abs(len(ol) - len(nl))


def diff(old_dir: str, new_dir: str) -> int:
    from itertools import combinations

    bad = 0
    for name in sorted(os.listdir(old_dir)):
        old = open(os.path.join(old_dir, name)).read()
        new = open(os.path.join(new_dir, name)).read()
        po, pn = _params(old), _params(new)
        # the parameters the new kernel added: the positions that explain the most lines
        best = min(combinations(range(len(pn)), max(0, len(pn) - len(po))),
                   key=lambda skip: _compare(old, new, po, pn, skip))
        differ = _compare(old, new, po, pn, best)
        bad += differ > 0
        added = ", ".join(f"{pn[i][0]}: {pn[i][1].strip()} (parameter {i})" for i in best)
        print(f"{name}: {differ} lines differ; parameters added: {added or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--diff"] and len(argv) == 3:
        sys.exit(diff(argv[1], argv[2]))
    if len(argv) != 1 or argv[0].startswith("-"):  # --help, a typo: not an output folder
        sys.exit(__doc__.split("\n\n")[1])
    snapshot(argv[0])
