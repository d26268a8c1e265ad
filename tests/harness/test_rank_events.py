"""The ranks' events (harness/rank_events.py): each kind is written as one JSON line and read back
equal; a line cut off or garbled, or of a kind this version does not know, is kept and passed over
as before; the runs recorded on the GPU host (older lines, without the fields added since) read as
typed events."""

from __future__ import annotations

import json
from dataclasses import replace

from cuco_tui.harness.launcher import _Tail
from cuco_tui.harness.rank_events import (KINDS, Aborted, BaselineMeasured, CloseWarning, Done, EventLog, Failed,
                                          Garbled, Idle, Joined, Launched, Leaving, PerturbEnded, PerturbStarted, PerturbWarning,
                                          PlanStarted, ProfileCaptured, RankEvent, ReferenceSaved, ReferenceWarning, ShapeStarted, Timed, TimedOut,
                                          TraceTimed, Unrecognized, Verified, parse_line, read_events)
from repo_paths import DATA

TRACE = ({"slot": 0, "state": "waiting", "site": 97, "kind": "flag", "peer": 1, "id": 1, "expected": 3,
          "observed": 2, "completed": 5, "label": "arrived"},)

ONE_OF_EACH: list[RankEvent] = [
    Joined(device=1, name="NVIDIA H100", pid=4242),
    Joined(device=1, name="NVIDIA H100", pid=4242, plans=3),
    PlanStarted(shapes=("verify", "square-8k"), mode="evaluate"),
    ShapeStarted(shape="verify", level="verify", dims={"M": 1536, "K": 512, "N": 1024}),
    Launched(shape="verify", check=2, limit_s=5.0, back_to_back=True, label="back to back"),
    Verified(shape="verify", level="verify", check=5, output="y", ok=False, elements=786432, unwritten=3,
             nonfinite=1, max_rel_error=0.75, sum_sq_diff=2.5, sum_sq_ref=1e4, worst_index=(17, 3), worst_got=1.5,
             worst_want=-0.25, rtol=0.02, floor=0.001, l2_rel_error=0.0158, label="perturbed, seed 41, 1st",
             perturb_seed=41),
    Timed(shape="square-8k", dims={"M": 8192}, candidate_ms=(1.25, 1.5), reference_ms=(2.0, 2.25)),
    TraceTimed(shape="long-seq", on_ms=(1.02, 1.04), off_ms=(1.0, 1.0)),
    BaselineMeasured(shape="square-8k", dims={"M": 8192}, reference_ms=(3.0, 3.5),
                     parts_ms={"gemm": (2.0, 2.5), "allgather": (1.0, 1.25)}, comm_bytes=1 << 27,
                     peer_copy_ms=(0.5, 0.75), late={"gemm": 2}),
    ReferenceSaved(shape="verify", dims={"M": 256, "K": 192}, file="reference-verify-rank1.npz"),
    PerturbStarted(shape="verify", round=1, seed=41, kind="rank_late", target=1, description="rank 1 starts late",
                   unit_us=2000, start_delay_us=8000),
    PerturbEnded(shape="verify", round=1, seed=41, ok=True, seconds=0.05, calls=12, delayed=3, delayed_us=6000,
                 skipped=0, errors=0, per_class={"copy": 0, "event": 0, "kernel": 6, "nccl": 6, "gemm": 0}),
    ProfileCaptured(shape="long-seq", launches=5, file="profile-rank1.json", activities=412, dropped=3),
    ProfileCaptured(shape="long-seq", launches=5, problem="CUPTI is not installed on this host"),
    Done(),
    Idle(plans=4),
    Leaving(reason="256 MiB of GPU memory not given back"),
    ReferenceWarning(message="graphs off"),
    PerturbWarning(message="its stream could not be held back"),
    CloseWarning(message="closing the harness's NCCL group did not finish within 30.0 s"),
    Failed(kind="cuda", message="cudaErrorIllegalAddress", phase="verify:verify", traceback="Traceback ...",
           trace=TRACE),
    TimedOut(phase="verify:verify", what="candidate launch (check 1)", limit_s=20.0, message="did not finish",
             trace=TRACE),
    Aborted(phase="bench:square-8k", what="harness barrier", limit_s=30.0, message="the launcher stopped the group"),
    Garbled(text='{"event": "verify", "rank": 1, "sh'),
]


def _concrete(cls: type[RankEvent]) -> set[type[RankEvent]]:
    out = set()
    for sub in cls.__subclasses__():
        out |= ({sub} if sub.KIND else set()) | _concrete(sub)
    return out


def test_every_kind_is_written_as_one_line_and_read_back_equal(tmp_path):
    assert {type(e) for e in ONE_OF_EACH} == set(KINDS.values()) == _concrete(RankEvent)
    log = EventLog(tmp_path / "rank3.jsonl", 3)
    for event in ONE_OF_EACH:
        log.emit(event)
    back = read_events(tmp_path / "rank3.jsonl")
    assert [replace(e, t=0.0) for e in back] == [replace(e, rank=3) for e in ONE_OF_EACH]
    assert all(e.t > 0 for e in back)
    # The line keeps the shape the launcher, the tools and the recorded runs know.
    first = json.loads((tmp_path / "rank3.jsonl").read_text().splitlines()[0])
    assert list(first)[:3] == ["event", "rank", "t"] and first["event"] == "joined" and first["pid"] == 4242


def test_a_cut_off_line_an_unknown_kind_and_a_line_without_its_fields_are_kept_aside(tmp_path):
    path = tmp_path / "rank0.jsonl"
    tail = _Tail(path)
    path.write_text('{"event": "done", "rank": 0, "t": 1.0}\n{"event": "verify", "rank": 0, "sha')
    assert tail.read() == [Done(rank=0, t=1.0)]  # the unfinished line waits for the rest of it
    with open(path, "a") as f:
        f.write('pe": 1}\nnot json at all\n{"event": "env", "hostid": "h1"}\n{"event": "timing", "rank": 0}\n[1, 2]\n')
    assert tail.read() == [
        Garbled(text='{"event": "verify", "rank": 0, "shape": 1}'),  # a verify line without its fields
        Garbled(text="not json at all"),
        Unrecognized(kind="env", fields={"hostid": "h1"}),
        Garbled(text='{"event": "timing", "rank": 0}'),
        Garbled(text="[1, 2]"),
    ]
    assert parse_line(b"\xff\xfe garbage") == Garbled(text="\ufffd\ufffd garbage")


def test_the_runs_recorded_on_the_gpu_host_read_as_typed_events():
    for run in ("measured", "wrong_values", "unwritten", "hang"):
        for rank in (0, 1):
            events = read_events(DATA / "runs" / run / f"rank{rank}.jsonl")
            assert events and not [e for e in events if isinstance(e, (Garbled, Unrecognized))], (run, rank)
            assert all(e.rank == rank for e in events)
    verify = next(e for e in read_events(DATA / "runs" / "measured" / "rank0.jsonl") if isinstance(e, Verified))
    assert verify.label == "" and verify.perturb_seed is None and verify.floor == 0.0  # fields added since
    hang = read_events(DATA / "runs" / "hang" / "rank0.jsonl")[-1]
    assert isinstance(hang, TimedOut) and hang.trace and hang.trace[0]["kind"] == "flag"
