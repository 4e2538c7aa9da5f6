"""Compiler fuzzing (docs/fuzzing.md): random small kernels in the styles users write, fused
with random verified schedules; each case must be refused with a typed syncopate error or
emulate clean (no race, output equal to the unfused kernel) under every policy it tries."""

from .gen import ADDRESSING, BODIES, TILINGS, Case, generate, load_kernel

__all__ = ["ADDRESSING", "BODIES", "TILINGS", "Case", "generate", "load_kernel"]
