"""`cuco baseline`'s reading of what the ranks reported (evaluate/baseline.read_baseline): the
slowest rank of each repetition, the reference's parts, the copy-engine ceiling, the reference's
warnings, and a failed rank as an error. The events go through the ranks' files as a run writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuco_tui.evaluate.baseline import BaselineError, read_baseline
from cuco_tui.harness.launcher import GroupRun, RankOutcome
from cuco_tui.harness.rank_events import (BaselineMeasured, Done, EventLog, Failed, RankEvent, ReferenceWarning,
                                          read_events)

DIMS = {"M": 8192, "K": 8192, "N": 8192}


def _rank(tmp_path: Path, rank: int, events: list[RankEvent], exit_code: int = 0) -> RankOutcome:
    log = EventLog(tmp_path / f"rank{rank}.jsonl", rank)
    for e in events:
        log.emit(e)
    return RankOutcome(rank, rank + 4, 100 + rank, exit_code, read_events(tmp_path / f"rank{rank}.jsonl"))


def _measured(reference, gemm, allgather, peer=()) -> BaselineMeasured:
    return BaselineMeasured(shape="square-8k", dims=DIMS, reference_ms=reference,
                            parts_ms={"gemm": gemm, "allgather": allgather}, comm_bytes=1 << 26, peer_copy_ms=peer)


def test_the_baseline_is_the_slowest_rank_of_each_repetition(tmp_path):
    ranks = [_rank(tmp_path, 0, [_measured((3.0, 4.0, 3.0), (2.0, 2.0, 2.0), (1.0, 1.5, 1.0), (0.5, 0.5, 0.5)),
                                 ReferenceWarning(message="graphs off"), Done()]),
             _rank(tmp_path, 1, [_measured((3.5, 3.0, 3.0), (2.5, 2.0, 2.0), (1.0, 1.0, 1.0), (0.5, 0.7, 0.5)),
                                 ReferenceWarning(message="graphs off"), Done()])]
    b = read_baseline(GroupRun(ranks, 12.0, False, False, True, tmp_path), "gemm_allgather")
    assert (b.workload, b.gpus, b.seconds, b.warnings) == ("gemm_allgather", [4, 5], 12.0, ["graphs off"])
    (s,) = b.shapes
    assert (s.shape, s.dims, s.comm_bytes, s.world) == ("square-8k", DIMS, 1 << 26, 2)
    assert s.reference.median == 3.5 and s.reference.n == 3  # per repetition: 3.5, 4.0, 3.0
    assert sorted(s.parts) == ["allgather", "gemm"] and s.parts["gemm"].median == 2.0
    assert s.parts["allgather"].max == 1.5 and s.peer_copy.median == 0.5 and s.peer_copy.max == 0.7
    assert s.align == "device"  # the run plan's default; under --align host, the plan says so
    host = read_baseline(GroupRun(ranks, 12.0, False, False, True, tmp_path), "gemm_allgather", align="host")
    assert [x.align for x in host.shapes] == ["host"]


def test_a_reference_without_a_byte_count_has_no_copy_engine_ceiling(tmp_path):
    event = BaselineMeasured(shape="square-8k", dims=DIMS, reference_ms=(3.0,), parts_ms={"gemm": (2.0,)})
    b = read_baseline(GroupRun([_rank(tmp_path, 0, [event, Done()])], 1.0, False, False, True, tmp_path), "w")
    assert b.shapes[0].peer_copy is None and b.shapes[0].comm_bytes == 0 and b.shapes[0].peer_gbps is None


def test_a_rank_that_failed_fails_the_baseline_with_its_message(tmp_path):
    ranks = [_rank(tmp_path, 0, [_measured((3.0,), (2.0,), (1.0,)), Done()]),
             _rank(tmp_path, 1, [Failed(kind="cuda", message="cudaErrorIllegalAddress")], exit_code=2)]
    with pytest.raises(BaselineError, match="rank 1: cudaErrorIllegalAddress"):
        read_baseline(GroupRun(ranks, 1.0, False, True, True, tmp_path), "gemm_allgather")


def test_repetitions_that_started_after_the_alignment_pause_are_noted_with_their_rank(tmp_path):
    late = BaselineMeasured(shape="square-8k", dims=DIMS, reference_ms=(3.0, 3.1, 3.2), parts_ms={"gemm": (2.0, 2.1, 2.2)},
                            late={"the reference": 0, "gemm": 2})
    ranks = [_rank(tmp_path, 0, [_measured((3.0, 3.1, 3.2), (2.0,) * 3, (1.0,) * 3), Done()]),
             _rank(tmp_path, 1, [late, Done()])]
    b = read_baseline(GroupRun(ranks, 1.0, False, False, True, tmp_path), "gemm_allgather")
    assert b.notes == ["square-8k, rank 1: 2 of 3 repetitions of gemm started after the 300 µs alignment pause had "
                       "run out: those times hold host launch latency"]
    assert type(b).from_dict(b.to_dict()).notes == b.notes  # kept in `cuco baseline --json`

