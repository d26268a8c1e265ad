"""The float64 run of a program under gloo takes all_to_all of tensor lists where the gloo of the
torch version at hand refuses it (torch 2.11 on the GPU hosts: "Backend gloo does not support
alltoall"), as NCCL takes it: two real gloo ranks, the list call refused as that gloo refuses it,
each rank receiving every peer's part, of unequal sizes, in its own output tensors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from program_helpers import spawned_ranks  # noqa: E402


def _rank(rank: int, init: str, results) -> None:
    import torch.distributed as dist

    from cuco_tui.workload.program.gloo_rank import _all_to_all_as_nccl_does

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        def refused(*args, **kwargs):
            raise RuntimeError("Backend gloo does not support alltoall")

        dist.all_to_all = refused  # as torch 2.11's gloo answers
        _all_to_all_as_nccl_does(dist)
        # rank r sends (r+1)*10 + j to peer j, peer j's part with j+1 rows of 2
        ins = [torch.full((j + 1, 2), float((rank + 1) * 10 + j), dtype=torch.float64) for j in range(2)]
        outs = [torch.empty(rank + 1, 2, dtype=torch.float64) for _ in range(2)]
        work = dist.all_to_all(outs, ins, async_op=True)
        work.wait()
        results.put((rank, [o.tolist() for o in outs]))
    finally:
        dist.destroy_process_group()


def test_a_refused_all_to_all_of_lists_is_made_of_all_to_all_single(tmp_path):
    got = dict(spawned_ranks(_rank, 2, tmp_path))
    # rank 0 receives from peer i its part for rank 0: 1 row of (i+1)*10 + 0
    assert got[0] == [[[10.0, 10.0]], [[20.0, 20.0]]]
    assert got[1] == [[[11.0, 11.0], [11.0, 11.0]], [[21.0, 21.0], [21.0, 21.0]]]
