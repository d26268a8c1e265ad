"""The float64 run of a program under gloo leaves, as NCCL does, the tensor of every rank but dist.reduce's
destination as it was (the gloo of the GPU host's torch 2.11 left sums there, which made
ParallelKernelBench's 4_reduce differ from its own float64 run there; the gloo of torch 2.13 keeps
them): three real gloo ranks, reduce answering as that gloo did, the destination with the sum, the
others with their own values, by global and by group rank, blocking and async."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from program_helpers import spawned_ranks  # noqa: E402


def _rank(rank: int, init: str, results) -> None:
    import torch.distributed as dist

    from cuco_tui.workload.program.gloo_rank import _reduce_as_nccl_does

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=3)
    try:
        def everywhere(tensor, dst=None, op=dist.ReduceOp.SUM, group=None, async_op=False, group_dst=None):
            return dist.all_reduce(tensor, op, group, async_op)  # the sum on every rank, as that gloo left it

        dist.reduce = everywhere
        _reduce_as_nccl_does(dist)
        _reduce_as_nccl_does(dist)  # a later job of the same process: wrapped once
        a = torch.full((2,), float(rank + 1), dtype=torch.float64)
        dist.reduce(a, dst=1)
        b = torch.full((2,), float(10 * (rank + 1)), dtype=torch.float64)
        dist.reduce(b, 2, dist.ReduceOp.SUM, None, True).wait()
        c = torch.full((2,), float(rank + 1), dtype=torch.float64)
        dist.reduce(c, group_dst=0)
        results.put((rank, *(sorted(set(t.tolist())) for t in (a, b, c))))
    finally:
        dist.destroy_process_group()


def test_reduce_leaves_the_ranks_other_than_its_destination_as_nccl_does(tmp_path):
    got = {r: (a, b, c) for r, a, b, c in spawned_ranks(_rank, 3, tmp_path)}
    assert got[1][0] == [6.0] and got[0][0] == [1.0] and got[2][0] == [3.0]
    assert got[2][1] == [60.0] and got[0][1] == [10.0] and got[1][1] == [20.0]
    assert got[0][2] == [6.0] and got[1][2] == [2.0] and got[2][2] == [3.0]
