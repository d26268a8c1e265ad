import os
import sys
import time
from pathlib import Path

from cuco_tui.harness.launcher import run_group
from cuco_tui.harness.plan import RunPlan
from cuco_tui.harness.rank_events import Aborted, Done, Failed, Unrecognized
from repo_paths import TESTS

PLAN = RunPlan(mode="evaluate", workload="test", reference="", library=None, shapes=(), rtol=0.02, floor=0.0,
               warmup=1, repetitions=1, nonce=7)


def fake(*behaviours: str) -> list[str]:
    """The stand-in rank (tests/fake_rank.py), rank r behaving as behaviours[r] says."""
    return [sys.executable, str(TESTS / "fake_rank.py"), ",".join(behaviours)]


def _alive(pid: int, settle_s: float = 3.0) -> bool:
    """True if `pid` still runs `settle_s` after we asked (a SIGKILLed process takes a moment)."""
    end = time.monotonic() + settle_s
    while _running(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return _running(pid)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _children(rundir: Path, world: int) -> list[int]:
    return [int((rundir / f"child{r}.pid").read_text()) for r in range(world) if (rundir / f"child{r}.pid").exists()]


def test_all_ranks_finish(tmp_path):
    run = run_group(PLAN, [0, 1], tmp_path, deadline_s=30, worker_argv=fake("ok", "ok"))
    assert not run.aborted and not run.deadline_hit
    assert [r.exit_code for r in run.ranks] == [0, 0]
    assert all(r.last(Done) for r in run.ranks)
    assert (tmp_path / "plan.json").exists()


def test_a_crashed_rank_takes_the_whole_group_down(tmp_path):
    t0 = time.monotonic()
    run = run_group(PLAN, [0, 1, 2], tmp_path, deadline_s=60, worker_argv=fake("hang", "crash", "hang-deaf"))
    assert time.monotonic() - t0 < 15
    assert run.aborted and not run.deadline_hit
    crashed = run.ranks[1]
    assert crashed.exit_code == -11 and "SIGSEGV" in crashed.describe_exit()
    assert run.ranks[0].last(Aborted) is not None  # it heard the abort and said where it was
    assert run.ranks[2].killed  # it ignored the abort and was killed
    for r in run.ranks:
        assert not _alive(r.pid)
    for pid in _children(tmp_path, 3):
        assert not _alive(pid), "a grandchild survived its rank"


def test_an_error_report_is_kept_and_the_others_are_stopped(tmp_path):
    run = run_group(PLAN, [0, 1], tmp_path, deadline_s=60, worker_argv=fake("error", "hang"))
    assert run.ranks[0].exit_code == 2
    assert "illegal memory access" in run.ranks[0].last(Failed).message
    assert run.ranks[1].last(Aborted)
    assert not _alive(run.ranks[1].pid)


def test_the_deadline_stops_a_group_where_every_rank_hangs(tmp_path):
    t0 = time.monotonic()
    run = run_group(PLAN, [0, 1], tmp_path, deadline_s=1.5, worker_argv=fake("hang-deaf", "hang-deaf"))
    took = time.monotonic() - t0
    assert run.deadline_hit and run.aborted
    assert took < 1.5 + 3.0 + 5.0
    assert all(r.killed for r in run.ranks)
    for pid in [r.pid for r in run.ranks] + _children(tmp_path, 2):
        assert not _alive(pid)


def test_children_get_the_multicast_off_environment(tmp_path):
    script = tmp_path / "envdump.py"
    script.write_text(
        "import json, os, sys\n"
        "rundir = json.load(open(sys.argv[2]))['rundir']\n"
        "keys = ['NCCL_NVLS_ENABLE', 'NVSHMEM_DISABLE_NVLS', 'TORCH_SYMM_MEM_DISABLE_MULTICAST']\n"
        "open(os.path.join(rundir, 'rank0.jsonl'), 'w').write(json.dumps({'event': 'env', **{k: os.environ.get(k) for k in keys}}) + '\\n')\n"
    )
    os.environ["NCCL_NVLS_ENABLE"] = "1"
    try:
        run = run_group(PLAN, [0], tmp_path / "r", deadline_s=30, worker_argv=[sys.executable, str(script)])
    finally:
        del os.environ["NCCL_NVLS_ENABLE"]
    env = run.ranks[0].last(Unrecognized)  # an event kind of this test's own
    assert (env.kind, env.fields) == ("env", {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1",
                                              "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"})


def _dump_env_script(tmp_path: Path) -> Path:
    script = tmp_path / "hostid.py"
    script.write_text(
        "import json, os, sys\n"
        "rank = int(sys.argv[4])\n"
        "rundir = json.load(open(sys.argv[2]))['rundir']\n"
        "open(os.path.join(rundir, f'rank{rank}.jsonl'), 'w').write("
        "json.dumps({'event': 'env', 'hostid': os.environ.get('NCCL_HOSTID')}) + '\\n')\n"
    )
    return script


def test_ranks_sharing_a_gpu_are_separate_hosts_to_nccl(tmp_path, monkeypatch):
    # NCCL refuses two ranks on one GPU of one host: each rank gets a host id of its own.
    monkeypatch.delenv("NCCL_HOSTID", raising=False)
    argv = [sys.executable, str(_dump_env_script(tmp_path))]
    run = run_group(PLAN, [0, 0, 0], tmp_path / "shared", deadline_s=30, worker_argv=argv)
    ids = [r.last(Unrecognized).fields["hostid"] for r in run.ranks]
    assert all(ids) and len(set(ids)) == 3, ids


def test_ranks_on_their_own_gpus_keep_one_host(tmp_path, monkeypatch):
    monkeypatch.delenv("NCCL_HOSTID", raising=False)
    argv = [sys.executable, str(_dump_env_script(tmp_path))]
    run = run_group(PLAN, [0, 1], tmp_path / "own", deadline_s=30, worker_argv=argv)
    assert [r.last(Unrecognized).fields["hostid"] for r in run.ranks] == [None, None]
