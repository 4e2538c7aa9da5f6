"""The runtime's side streams are its own (one GPU, no process group).

torch's stream pool hands its 32 streams per device out round-robin, so ``torch.cuda.Stream()``
can return the very stream the caller launches on. A ce side stream that aliased the caller's
stream would queue its copies behind the fused kernel that waits for them (a hang until the
watchdog fires); two loopback ranks on one pool stream would do the same to each other. The
runtime creates its streams with the driver instead (``_cuda.dedicated_stream``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available():
    pytest.skip("needs 1 CUDA GPU (none visible to torch)", allow_module_level=True)

pytestmark = pytest.mark.gpu


def test_pool_streams_repeat_and_dedicated_ones_do_not():
    from syncopate.runtime import _cuda
    dev = torch.device("cuda", 0)
    pool = [torch.cuda.Stream(device=dev).cuda_stream for _ in range(40)]
    assert len(set(pool)) < len(pool), "torch's pool no longer wraps: revisit the docstring"
    mine = [_cuda.dedicated_stream(dev) for _ in range(3)]
    handles = [s.cuda_stream for s in mine]
    assert len(set(handles)) == 3 and not set(handles) & set(pool)
    # usable as a torch stream: work on it runs and orders as on any stream
    x = torch.randn(1024, device=dev)
    mine[0].wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(mine[0]):
        y = x * 2
    mine[0].synchronize()
    assert torch.equal(y, x * 2)
