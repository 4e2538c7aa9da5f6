"""Kernel-side annotations for what the access analysis cannot see.

``hint_region2(ptr, lo0, hi0, lo1, hi1)`` (and ``hint_region1``/``hint_region3``), written in a
``@triton.jit`` kernel right before a load or store through ``ptr`` (a kernel parameter that
holds a communicated tensor), tells the compiler that the access touches the box
``[lo0, hi0) x [lo1, hi1)`` of the *global* tensor; ``hi - lo`` must be a constant (the tile
size).  Use it when the address arithmetic is beyond the analysis (gathers, pointer casts, a
``%`` it cannot read): the compiler says so and names the access.

The hints are ``noinline`` functions with empty bodies, so they survive Triton's inliner as
``tt.call`` ops in TTIR; the syncopate passes read and erase them (calls and callees), so they
cost nothing at run time.  In an unfused compile they are calls to empty functions.
"""

import triton
import triton.language as tl  # noqa: F401  (the kernels that import this use tl)


@triton.jit(noinline=True)
def syncopate_hint_region1(ptr, lo0, hi0):
    pass


@triton.jit(noinline=True)
def syncopate_hint_region2(ptr, lo0, hi0, lo1, hi1):
    pass


@triton.jit(noinline=True)
def syncopate_hint_region3(ptr, lo0, hi0, lo1, hi1, lo2, hi2):
    pass


hint_region1 = syncopate_hint_region1
hint_region2 = syncopate_hint_region2
hint_region3 = syncopate_hint_region3
