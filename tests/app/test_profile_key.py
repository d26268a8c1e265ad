"""`t` profiles the selected candidate (issue 34, item 4): refused in one line where no profile can
be taken, a shape asked for, then the profile run in a process of its own while the TUI answers,
and the candidate view's Profile tab shown once the process kept it in the session. The command
is a real subprocess: a small script that waits for the test's go-ahead (a file), then keeps a
profile through lineage/profiles.py as `cuco eval --session --profile` does, or fails saying why
on stderr (app/profile_run.py; the CLI's own path is tested in tests/cli)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cuco_tui.app.app import CucoApp
from cuco_tui.app.profile_run import Profiler, ProfileRequest, failure_reason
from cuco_tui.app.profiles import SEARCH_BUSY
from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.app.widgets.shape_picker import ShapePicker
from cuco_tui.harness.gpus import GpuInfo, GpuInventory
from cuco_tui.workload.manifest import load_workload
from candidate_session import BUNDLE, build_session, open_candidate, section_text
from dashboard_helpers import dashboard, make_app, stop
from pilot_helpers import wait_until

SIZE = (120, 40)
SHAPES = [s.name for s in load_workload("gemm_allgather").bench_shapes]
TWO_GPUS = GpuInventory((GpuInfo(0, "NVIDIA H100 80GB HBM3", 81559), GpuInfo(1, "NVIDIA H100 80GB HBM3", 81559)))

KEEPS = """
import sys, time
from pathlib import Path
from cuco_tui.core.profile import KERNEL, MEMCPY, Activity, Profile, summarize
from cuco_tui.lineage import SessionRepo
from cuco_tui.lineage.profiles import keep_profile

session, cid, shape, go = sys.argv[1:5]
deadline = time.monotonic() + 120  # a backstop: the test says go
while not Path(go).exists() and time.monotonic() < deadline:
    time.sleep(0.02)
acts = [Activity(KERNEL, "gemm_kernel", 0, 2_000_000, 0, 7),
        Activity(MEMCPY, "memcpy dtod", 1_000_000, 3_000_000, 0, 9, "dtod", 1 << 20)]
with SessionRepo.open(session) as repo:
    keep_profile(repo, cid, Profile(shape, 5, (summarize(acts, 0), summarize(acts[:1], 1))))
"""

FAILS = """
import sys
print("L1 compile", file=sys.stderr)
print("nvcc: fatal: the CUDA toolkit at /opt/nowhere is missing", file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")  # the real inventory finds none, here as on a GPU host


def script(tmp_path: Path, text: str) -> tuple[Path, Path]:
    """The script, and the file whose creation lets it go on."""
    path = tmp_path / "profile_script.py"
    path.write_text(text)
    return path, tmp_path / "go"


def profiler(path: Path, go: Path, gpus: GpuInventory | None = TWO_GPUS) -> Profiler:
    def command(r: ProfileRequest) -> list[str]:
        return [sys.executable, str(path), str(r.session), r.candidate_id, r.shape, str(go)]

    return Profiler(command) if gpus is None else Profiler(command, lambda: gpus)


def said(app, words: str) -> bool:
    return any(words in n.message for n in app._notifications)


def profile_notes(app) -> list[str]:
    return [n.message for n in app._notifications if n.title == "profile"]


@pytest.mark.asyncio
async def test_t_without_a_gpu_refuses_in_one_line_and_starts_nothing(tmp_path):
    path, go = script(tmp_path, "from pathlib import Path; import sys; Path(sys.argv[4]).touch()")
    build_session(tmp_path / "demo").close()
    app = CucoApp(open_session=tmp_path / "demo", profiler=profiler(path, go, gpus=None))  # harness/gpus.inventory
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        app.screen.jump_to("c0000")  # measured
        await pilot.press("t")
        assert await wait_until(pilot, lambda: said(app, "this machine has none"))
        (note,) = profile_notes(app)
        assert note == "a profile records what the GPUs run, and this machine has none: GPUs hidden by CUCO_NO_GPU=1"
        assert isinstance(app.screen, LineageScreen)  # no shape asked for
        assert app.profiles.profiler.running is None and not go.exists()


@pytest.mark.asyncio
async def test_a_failed_candidate_and_a_bundles_copy_are_refused_before_anything(tmp_path):
    path, go = script(tmp_path, KEEPS)
    repo = build_session(tmp_path / "demo")
    app = CucoApp(open_session=BUNDLE, profiler=profiler(path, go))
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        lineage = app.screen
        measured = next(r.id for r in lineage.rows if r.summary.status == "measured")
        lineage.jump_to(measured)
        await pilot.press("t")
        assert await wait_until(pilot, lambda: said(app, "temporary folder"))
        assert f"{measured} is read from a bundle imported into a temporary folder" in profile_notes(app)[-1]
        assert isinstance(app.screen, LineageScreen)
        await open_candidate(app, pilot, repo, "c0001")  # a compile error
        await pilot.press("t")
        assert await wait_until(pilot, lambda: said(app, "c0001 failed its evaluation (compile_error)"))
        assert isinstance(app.screen, CandidateScreen) and len(profile_notes(app)) == 2
        assert app.profiles.profiler.running is None and not go.exists()
    repo.close()


@pytest.mark.asyncio
async def test_the_shape_picker_lists_the_bench_shapes_and_escape_cancels(tmp_path):
    path, go = script(tmp_path, KEEPS)
    repo = build_session(tmp_path / "demo")
    app = CucoApp(profiler=profiler(path, go))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0000")
        await pilot.press("t")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ShapePicker))
        picker = app.screen
        assert picker.choices == SHAPES and len(SHAPES) > 1
        assert picker.highlighted == SHAPES[0]
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.screen is screen)
        assert not [w for w in app.workers if w.group == "profile"]  # nothing started
        assert app.profiles.profiler.running is None and profile_notes(app) == []
    repo.close()


@pytest.mark.asyncio
async def test_the_profile_tab_appears_when_the_profile_is_kept(tmp_path):
    path, go = script(tmp_path, KEEPS)
    repo = build_session(tmp_path / "demo")
    app = CucoApp(profiler=profiler(path, go))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0000")
        assert "profile" not in screen.tabs.ids
        await pilot.press("t")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ShapePicker))
        await pilot.press("down", "enter")  # the second shape
        line = screen.query_one("#candidate-profiling")
        assert await wait_until(pilot, lambda: line.has_class("-running") and f"at {SHAPES[1]}: 0:" in str(line.content))
        assert said(app, f"profiling c0000 at {SHAPES[1]} in a process of its own")
        await pilot.press("t")  # a second while it runs: one at a time
        assert await wait_until(pilot, lambda: said(app, f"a profile of c0000 at {SHAPES[1]} is running"))
        go.touch()
        assert await wait_until(pilot, lambda: screen.ready and "profile" in screen.tabs.ids)
        assert await wait_until(pilot, lambda: screen.tabs.active == "profile")
        assert f"profile of 5 launches at {SHAPES[1]}" in section_text(screen, "profile")
        assert not line.has_class("-running")
        assert said(app, f"profile of c0000 at {SHAPES[1]} kept")
        assert said(app, "exposed communication 33.3% of the span on rank 0")
    repo.close()


@pytest.mark.asyncio
async def test_a_failing_profile_says_why_from_its_stderr(tmp_path):
    path, go = script(tmp_path, FAILS)
    repo = build_session(tmp_path / "demo")
    app = CucoApp(profiler=profiler(path, go))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0000")
        await pilot.press("t")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ShapePicker))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: said(app, "failed after"))
        failed = [n for n in app._notifications if "failed after" in n.message]
        assert failed[0].severity == "error"
        assert failed[0].message.startswith(f"the profile of c0000 at {SHAPES[0]} failed after 0:")
        assert failed[0].message.endswith(": nvcc: fatal: the CUDA toolkit at /opt/nowhere is missing")
        assert await wait_until(pilot, lambda: app.profiles.profiler.running is None)
        assert "profile" not in screen.tabs.ids
        assert not screen.query_one("#candidate-profiling").has_class("-running")
    repo.close()


@pytest.mark.asyncio
async def test_a_live_search_is_paused_before_a_profile_and_not_resumed_during_it(tmp_path):
    path, go = script(tmp_path, KEEPS)
    app = make_app(tmp_path)
    app.profiles.profiler = profiler(path, go)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: "c0000" in dashboard(app).state.sources)
        search = app.live_search
        await pilot.press("t")  # the search runs: it would evaluate beside the profile
        assert await wait_until(pilot, lambda: said(app, SEARCH_BUSY))
        await pilot.press("p")
        assert await wait_until(pilot, lambda: search.steering.paused and not search.gpus_busy)
        await pilot.press("t")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ShapePicker))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: app.profiles.profiler.running is not None)
        await pilot.press("p")  # resuming would start evaluations on the profile's GPUs
        assert await wait_until(pilot, lambda: said(app, "resume when it ends"))
        assert search.steering.paused
        await pilot.press("o")  # the candidate, opened while its profile runs, counts its time
        assert await wait_until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.ready)
        screen = app.screen
        assert screen.query_one("#candidate-profiling").has_class("-running")
        go.touch()
        assert await wait_until(pilot, lambda: said(app, "profile of c0000 at"))
        assert await wait_until(pilot, lambda: screen.ready and screen.tabs.active == "profile")
        await pilot.press("escape")
        await stop(pilot, app)
    from cuco_tui.lineage import SessionRepo
    from cuco_tui.lineage.profiles import stored_profile

    with SessionRepo.open(tmp_path / "session") as repo:
        assert stored_profile(repo, "c0000").shape == SHAPES[0]


@pytest.mark.asyncio
async def test_quitting_ends_a_running_profile_and_its_process(tmp_path):
    path, go = script(tmp_path, "import os, sys, time; from pathlib import Path\n"
                                "Path(sys.argv[4] + '.pid').write_text(str(os.getpid()))\n"
                                "time.sleep(600)\n")
    repo = build_session(tmp_path / "demo")
    app = CucoApp(profiler=profiler(path, go))
    pid_file = Path(f"{go}.pid")
    async with app.run_test(size=SIZE) as pilot:
        await open_candidate(app, pilot, repo, "c0000")
        await pilot.press("t")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ShapePicker))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: pid_file.exists() and pid_file.read_text())
        pid = int(pid_file.read_text())
        await pilot.press("q")
    assert await gone(pid)
    repo.close()


async def gone(pid: int) -> bool:
    """The process has ended (reaped by the profile's worker, or a zombie no longer running)."""
    import asyncio

    for _ in range(2400):  # a backstop of about 2 minutes; it ends as soon as the process does
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        await asyncio.sleep(0.05)
    return False


def test_the_reason_is_the_clis_refusal_else_the_failed_result_else_stderrs_last_line():
    assert failure_reason(2, "", "cuco: --profile: gemm_allgather has no bench shape 'x'\n") == \
        "--profile: gemm_allgather has no bench shape 'x'"
    result = '{"status": "deadlock", "reason": "rank 0: candidate launch\\n did not finish"}'
    assert failure_reason(1, result, "hint: cuco eval c0003 --sanitize memcheck\n") == \
        "deadlock: rank 0: candidate launch did not finish"
    assert failure_reason(1, "", "a\n\nlast words\n\n") == "last words"
    assert failure_reason(-9, "", "") == "it exited with status -9 and said nothing"
    assert failure_reason(None, "", "") == "cancelled: cuco-tui quit while it ran"


def test_the_default_command_is_cuco_evals_and_its_refusal_comes_back_as_the_reason(tmp_path):
    """The real `cuco eval ID --session S --profile SHAPE` (in a process of its own), refusing here."""
    build_session(tmp_path / "demo").close()
    ended = Profiler().run(ProfileRequest(tmp_path / "demo", "c0000", "no-such-shape"))
    assert ended.returncode == 2 and not ended.ok
    assert ended.reason == (f"--profile: gemm_allgather has no bench shape 'no-such-shape'; its bench shapes are "
                            f"{', '.join(SHAPES)}")
