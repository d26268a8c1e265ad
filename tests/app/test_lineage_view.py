"""The lineage screen on the recorded example session (52 candidates from an H200x2 run) and
on a synthetic 5,000-candidate session for the time to open."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from textual.widgets import Static

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.compare import CompareScreen
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.app.widgets.lineage.candidate_table import CandidateTable
from cuco_tui.app.widgets.lineage.rows import LineageFilter
from cuco_tui.lineage import SessionRepo, import_bundle
from cuco_tui.core.records import CandidateRecord
from pilot_helpers import screen_lines, wait_until
from repo_paths import DATA, REPO


SIZE = (120, 40)
# The first recorded GPU session, kept fixed for exact assertions; the example under
# sessions/examples/ (checked more loosely below) is replaced when a newer search is recorded.
BUNDLE = DATA / "gemm_allgather-52-candidates.bundle"
EXAMPLES = REPO / "sessions" / "examples"
SYNTHETIC = 5000


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")


def rendered(widget: Static) -> str:
    return str(widget.render())


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_speedup_backend_and_parents_are_in_view_and_every_key(tmp_path, size):
    """Issue 36, item 17: at 80x24 the table stopped after the status; at 120x40 the parents
    column showed "p" and "c", and the footer and the header were cut."""
    import_bundle(BUNDLE, tmp_path / "example").close()
    app = CucoApp(open_session=tmp_path / "example")
    async with app.run_test(size=size) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        app.screen.jump_to("c0002")  # a crossover: two parents
        await pilot.pause()
        lines = screen_lines(app)
        header = next(line for line in lines if line.startswith("graph"))
        assert header.split()[:6] == ["graph", "id", "status", "speedup", "backend", "parents"]
        row = next(line.split() for line in lines if " c0002 " in line)
        record = app.screen.repo.record("c0002")
        assert row[2:6] == [record.status, f"{record.speedup:.2f}x", record.design["backend"], ",".join(record.parents)]
        shown = " ".join(lines)
        for key in ("q Quit", "o Open", "esc Back", "c Compare", "/ Go to id", "w Export", "i Island", "f Status",
                    "d Backend", "0 No filter", "s Search", "l Lineage", "b Browse", "^p palette"):
            assert key in shown, key
        assert "machine not recorded (a session made before cuco recorded it)" in shown


@pytest.mark.asyncio
async def test_at_80x24_a_session_with_failures_shows_every_column_whole(tmp_path):
    """Compile errors, crossovers and copy engines widen the columns: the island column read "isl"."""
    from cuco_tui.app.widgets.lineage.candidate_table import COLUMNS

    import_bundle(EXAMPLES / "gemm_allgather-failures-shared-gpu.bundle", tmp_path / "failures").close()
    app = CucoApp(open_session=tmp_path / "failures")
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        await pilot.pause()
        width = app.screen.query_one(CandidateTable).scrollable_content_region.width  # not its scrollbar
        lines = [line[:width] for line in screen_lines(app)]
        assert next(line for line in lines if line.startswith("graph")).split() == list(COLUMNS)
        rows = [line.split() for line in lines if " c00" in line and not line.startswith(" ")]
        summaries = {s.id: s for s in app.screen.repo.summaries()}
        assert rows and all(row[-1] == str(summaries[row[1]].island) for row in rows)
        assert "compile_error" in {row[2] for row in rows}


@pytest.mark.asyncio
async def test_w_writes_what_cuco_export_writes_and_says_where(tmp_path, monkeypatch, capsys):
    """Issue: w wrote the .cu, result.json, rationale.md and design.json, a folder that did not build."""
    from cuco_tui.cli import main

    monkeypatch.chdir(tmp_path)
    import_bundle(BUNDLE, tmp_path / "example").close()
    app = CucoApp(open_session=tmp_path / "example")
    folder = tmp_path / "export" / "example-c0011"
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        app.screen.jump_to("c0011")
        await pilot.press("w")
        assert await wait_until(pilot, lambda: any(n.title == "export" for n in app._notifications))
        said = next(n.message for n in app._notifications if n.title == "export")
        assert f"into {folder}" in said and "README.md (how to build it)" in said
        (folder / "README.md").write_text("my notes\n")  # the user's own: never overwritten
        await pilot.press("w")
        assert await wait_until(pilot, lambda: any(n.severity == "error" for n in app._notifications))
        refused = next(n.message for n in app._notifications if n.severity == "error")
        assert refused.startswith("export of c0011 failed: ") and "was not written by `cuco export`" in refused
        assert (folder / "README.md").read_text() == "my notes\n"
    (folder / "README.md").unlink()
    assert main(["export", str(tmp_path / "example"), "--candidate", "c0011", "--out", str(folder)]) == 0
    capsys.readouterr()
    cli = tmp_path / "cli"
    assert main(["export", str(tmp_path / "example"), "--candidate", "c0011", "--out", str(cli)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in cli.iterdir())
    assert "example-c0011.cu" in {p.name for p in cli.iterdir()} and (cli / "cuco_runtime.cuh").is_file()
    assert all((folder / p.name).read_bytes() == p.read_bytes() for p in cli.iterdir() if p.name != "README.md")


@pytest.mark.asyncio
async def test_w_on_a_bundle_names_the_bundle_not_its_temporary_import(tmp_path, monkeypatch):
    """A bundle is read from a temporary folder deleted on close: the export names the bundle."""
    from cuco_tui.lineage.bundle import open_session_or_bundle

    monkeypatch.chdir(tmp_path)
    repo = open_session_or_bundle(BUNDLE)
    app = CucoApp(open_session=repo)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        app.screen.jump_to("c0011")
        await pilot.press("w")
        assert await wait_until(pilot, lambda: any(n.title == "export" for n in app._notifications))
    readme = next((tmp_path / "export").glob("*/README.md")).read_text()
    assert BUNDLE.name in readme and "cuco-lineage-" not in readme


@pytest.mark.asyncio
async def test_example_lineage(tmp_path):
    import_bundle(BUNDLE, tmp_path / "example").close()
    app = CucoApp(open_session=tmp_path / "example")  # a session folder
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        screen = app.screen
        table = screen.query_one(CandidateTable)
        assert table.row_count == 52
        assert "52 of 52" in rendered(screen.query_one("#lineage-bar", Static))

        await pilot.press("f")  # statuses cycle: all -> measured -> rejected
        assert screen.filter.status == "measured"
        assert table.row_count == 39
        await pilot.press("0")
        assert table.row_count == 52

        await pilot.press("slash", "escape")  # escape closes the id box, not the screen
        assert app.screen is screen
        await pilot.press("slash")
        await pilot.press(*"c0011", "enter")
        assert table.highlighted_id == "c0011"
        facts = screen.query_one("#lineage-facts", Static)
        assert await wait_until(pilot, lambda: "c0011" in rendered(facts) and "1.38" in rendered(facts))
        result = screen.query_one("#lineage-result")
        assert await wait_until(pilot, lambda: "1.38x" in rendered(result.query_one("#result-facts", Static)))

        assert screen.jump_to("c0004")
        await pilot.press("c")
        assert screen.marked == "c0004"
        screen.jump_to("c0011")
        await pilot.press("c")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.diff_text is not None)
        diff = app.screen.diff_text
        assert "--- c0004/candidate.cu" in diff and "+++ c0011/candidate.cu" in diff
        assert any(line.startswith(("+", "-")) and line[1:2] not in "+-" for line in diff.splitlines())
        await pilot.press("escape")
        assert app.screen is screen


@pytest.mark.asyncio
async def test_l_opens_example_when_no_session(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the bundle is imported
    root = tmp_path / "sessions"
    (root / "examples").mkdir(parents=True)
    app = CucoApp(sessions_root=root)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        assert await wait_until(pilot, lambda: any("no session" in n.message for n in app._notifications))
        assert not isinstance(app.screen, LineageScreen)  # nothing to open: a notification
    (root / "examples" / BUNDLE.name).symlink_to(BUNDLE)
    app = CucoApp(sessions_root=root)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        assert app.screen.query_one(CandidateTable).row_count == 52


def test_cli_open_missing_path(tmp_path, capsys):
    from cuco_tui.cli import tui_main

    assert tui_main(["open", str(tmp_path / "nowhere")]) == 2
    assert "no session or bundle" in capsys.readouterr().err


def _synthetic_session(path: Path, n: int) -> SessionRepo:
    repo = SessionRepo.create(path, "gemm_allgather", {"generations": n})
    statuses = ("measured", "incorrect", "compile_error", "rejected", "no_gpu")
    backends = ("nccl_lsa", "copy_engine", "nvshmem")
    for i in range(n):
        parents = () if i == 0 else (f"c{(i - 1) // 3:05d}",) if i % 7 else (f"c{i - 1:05d}", f"c{i // 2:05d}")
        status = statuses[i % len(statuses)]
        repo.commit_candidate(CandidateRecord(
            id=f"c{i:05d}", generation=i // 50, island=i % 4, kind="diff" if i else "seed",
            parents=tuple(dict.fromkeys(parents)), source=f"// candidate {i}\n", design={"backend": backends[i % 3]},
            rationale="synthetic", agent="offline", status=status,
            speedup=1.0 + i / n if status == "measured" else None))
    return repo


@pytest.mark.asyncio
async def test_5000_candidates_open_quickly(tmp_path):
    started = time.perf_counter()
    repo = _synthetic_session(tmp_path / "big", SYNTHETIC)
    print(f"\nbuilt a {SYNTHETIC}-candidate session in {time.perf_counter() - started:.1f} s")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        started = time.perf_counter()
        screen = LineageScreen(repo)
        await app.push_screen(screen)
        assert await wait_until(pilot, lambda: screen.ready and screen.is_mounted)
        elapsed = time.perf_counter() - started
        print(f"lineage view of {SYNTHETIC} candidates ready in {elapsed * 1000:.0f} ms")
        table = screen.query_one(CandidateTable)
        assert table.row_count == SYNTHETIC
        # What keeps it quick on any machine (target 1 s, docs/performance.md; a time here failed on
        # a loaded CI machine): only the rows on screen were drawn. A DataTable measured every cell
        # of all 5,000 rows, about a second.
        assert 0 < len(table._cache) <= table.size.height
        screen.set_filter(LineageFilter(island=1))
        assert screen.query_one(CandidateTable).row_count == SYNTHETIC // 4
    repo.close()


@pytest.mark.parametrize("bundle", sorted(EXAMPLES.glob("*.bundle")), ids=lambda p: p.stem)
def test_every_example_bundle_opens_with_a_measured_best(tmp_path, bundle):
    """What `b` offers a user without a GPU: each example is a real search, browsable here. The
    example of failures (benchmarks/example_failures.py: ranks sharing one GPU, so nothing timed)
    holds instead a compile error, an incorrect result and a deadlock beside verified candidates,
    and names the machine it ran on."""
    with import_bundle(bundle, tmp_path / bundle.stem) as repo:
        records = {r.id: r for r in repo.records()}
        best = repo.best()
        machine = repo.machine()
    if "-failures-" in bundle.name:
        statuses = {r.status for r in records.values()}
        assert {"compile_error", "incorrect", "deadlock", "verified"} <= statuses, statuses
        assert "measured" not in statuses  # nothing was timed
        assert all(r.speedup is None for r in records.values())
        assert machine is not None and machine.gpus and machine.driver and machine.nccl
        return
    assert len(records) >= 30
    assert best in records and records[best].speedup > 1.0


def test_verified_has_its_own_colour_and_an_exhausted_agents_placeholders_have_no_row(tmp_path):
    """Rows of the kv example: its four placeholders (an older engine's records of an agent with
    nothing new) are no candidates; the status filter offers what the rows hold."""
    from cuco_tui.app.widgets.lineage.rows import FAILURE_STYLE, lineage_rows, status_style

    assert status_style("verified") not in (FAILURE_STYLE, status_style("measured"))
    with import_bundle(EXAMPLES / "kv_transfer-offline-h200x2.bundle", tmp_path / "kv") as repo:
        summaries = repo.summaries()
    rows = lineage_rows(summaries)
    assert len(summaries) == 31 and len(rows) == 27
    assert not {"c0027", "c0028", "c0029", "c0030"} & {r.id for r in rows}
    assert {r.summary.status for r in rows} == {"measured", "rejected"}
