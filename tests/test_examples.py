"""The examples/ scripts on a machine without a GPU: they parse their arguments, say in one line
that they need a GPU (exit 2), and print no traceback.  On a GPU they run in loopback
(``python examples/X.py --loopback 2``) or under torchrun; scripts/gpu_examples.sh runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted(p for p in (Path(__file__).parent.parent / "examples").glob("*.py")
                  if not p.name.startswith("_"))


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"ring_attention.py", "fuse_your_kernel.py"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_without_gpu_says_so(path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: scripts/gpu_examples.sh runs the examples")
    proc = subprocess.run([sys.executable, str(path), "--loopback", "2"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "this example needs a CUDA GPU"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_help(path):
    proc = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--loopback" in proc.stdout
