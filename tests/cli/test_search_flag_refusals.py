"""Flags of `cuco search` and `cuco-tui` that cannot mean what they say are refused in one line
(exit 2) before anything starts: a resume with nothing left to do, a number that is none (nan,
inf) or negative, the Claude agent's --model and --budget with another agent, the search's
flags with `cuco-tui --evaluate`. A resume's new totals are kept with the session."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
from cli_helpers import one_line_error
from engine_helpers import FakeEvaluator, ScriptedAgent, make

from cuco_tui.cli import main, tui_main
from cuco_tui.cli.search import open_resumed
from cuco_tui.core.records import CandidateRecord
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.config import ConfigError, SearchConfig
from cuco_tui.search.sessions import open_session

SEARCH = ["search", "--workload", "gemm_allgather"]


def record(n: int, generation: int, status: str = "no_gpu") -> CandidateRecord:
    return CandidateRecord(
        id=f"c{n:04d}", generation=generation, island=0, kind="seed" if n == 0 else "diff",
        parents=() if n == 0 else (f"c{n - 1:04d}",), source=f"// {n}\n", design={}, rationale="",
        agent="offline", status=status, result={"reason": "compiled only"})


def session_with(path: Path, generations: int, done: int, *more: CandidateRecord, ended: str = "done") -> Path:
    """A session of gemm_allgather whose candidates reach generation `done`, then `more`, its
    search ended for `ended` (the engine's reason)."""
    with SessionRepo.create(path, "gemm_allgather", {"generations": generations, "islands": 1}) as repo:
        for g in range(done + 1):
            repo.commit_candidate(record(g, g))
        for r in more:
            repo.commit_candidate(r)
        repo.set_ended(ended)
    return path


def state_of(path: Path) -> tuple[str, ...]:
    with SessionRepo.open(path) as repo:
        return tuple(sorted(f"{r.path} {r.commit.hexsha}" for r in repo.git_repo.refs))


# ---------------------------------------------------------------------------- a resume with nothing to do


@pytest.mark.parametrize("flags", [[], ["--evaluations", "50"]])
def test_a_resume_of_a_session_that_ran_its_generations_says_what_to_pass(tmp_path, capsys, flags):
    session = session_with(tmp_path / "t3", generations=1, done=1)
    before = state_of(session)
    one_line_error(capsys, main(["search", "--resume", str(session), "--agent", "offline", *flags]),
                   "t3 ran its 1 generation(s)", "--generations N (N > 1)")
    one_line_error(capsys, tui_main(["--resume", str(session), "--agent", "offline", *flags]),
                   "ran its 1 generation(s)", "--generations N (N > 1)")
    assert state_of(session) == before


@pytest.mark.parametrize("ended", ["stopped", "interrupted", "budget", ""])  # "": killed, nothing recorded
def test_a_session_stopped_in_its_last_generation_resumes_with_the_next_one(tmp_path, capsys, ended):
    """Ctrl-C, a stop or the budget in the last generation: the search said to resume, so a plain
    resume runs one generation more (a committed generation is never run again) and says so."""
    session = session_with(tmp_path / "s", 1, 1, ended=ended)
    target = open_resumed(str(session), None, {}, None, None)
    target.close()
    assert target.config.generations == 2
    assert "stopped in its last generation (1 of 1): this resume runs generation 2" in capsys.readouterr().err


def test_a_finished_session_with_a_proposal_left_unreviewed_still_resumes(tmp_path):
    # the resume holds it for review again: something to do, though every generation ran
    from cuco_tui.search.outcomes import unreviewed

    left = unreviewed(record(2, 1, status="pending"), "review mode")
    session = session_with(tmp_path / "s", 1, 1, left)
    target = open_resumed(str(session), None, {}, None, None)
    target.close()
    assert target.config.generations == 1


def fast_search(monkeypatch):
    """`cuco search` with the scripted agent and the fake evaluator (no compile): all else is real."""
    from cuco_tui.search import launch

    engine = functools.partial(launch.SearchEngine, evaluate_fn=FakeEvaluator(), compile_ahead=False,
                               design_context=lambda point: "")
    monkeypatch.setattr(launch, "SearchEngine", engine)
    monkeypatch.setattr(launch, "agent_maker", lambda kind, model=None: lambda workload, config: ScriptedAgent())


def test_the_totals_a_resume_asks_for_are_kept_with_the_session(tmp_path, capsys, monkeypatch):
    fast_search(monkeypatch)
    session = session_with(tmp_path / "t1", generations=1, done=1)
    resume = ["search", "--resume", str(session), "--agent", "offline"]
    assert main(resume + ["--generations", "2", "--evaluations", "40"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["sessions", "--json", "--root", str(tmp_path)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["generations_done"], s["generations_planned"]) for s in listed] == [("t1", 2, 2)]
    repo, _, config = open_session(session)
    repo.close()
    assert (config.generations, config.evaluations, config.islands) == (2, 40, 1)
    # a plain resume goes on from the new total, not the one the session was started with
    one_line_error(capsys, main(resume), "ran its 2 generation(s)", "(N > 2)")


# ---------------------------------------------------------------------------- numbers that are none


def argparse_error(capsys, entry, argv: list[str], *words: str) -> None:
    """argparse's refusal (exit 2) of a value its type rejects, as the other typed flags are: its
    error line names `words`."""
    with pytest.raises(SystemExit) as out:
        entry(argv)
    err = capsys.readouterr().err
    assert out.value.code == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert "error:" in line and all(w in line for w in words), err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "-1"])
def test_a_budget_that_is_no_number_of_dollars_is_refused(tmp_path, capsys, value):
    # `=`: argparse would read a lone "-inf" as an option
    argparse_error(capsys, main, SEARCH + ["--agent", "claude", f"--budget={value}", "--session", str(tmp_path / "s")],
                   "--budget", "dollars, 0 or more", repr(value))
    argparse_error(capsys, tui_main, ["--agent", "claude", f"--budget={value}"], "--budget", "dollars, 0 or more")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("field", ["budget_usd", "selection_exponent", "confirm_margin", "plateau_margin",
                                   "explore_share", "novelty_threshold"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_the_config_refuses_a_float_setting_that_is_no_number(field, value):
    with pytest.raises(ConfigError, match=field.split("_")[0]):
        SearchConfig(**{field: value})


@pytest.mark.parametrize("usd", [math.nan, math.inf, -1.0])
def test_a_budget_set_mid_run_must_be_dollars(tmp_path, usd):
    engine, _, _ = make(tmp_path)
    with pytest.raises(ConfigError, match="budget"):
        engine.set_budget(usd)
    assert engine.steering.budget is None


# ---------------------------------------------------------------------------- the Claude agent's flags


@pytest.mark.parametrize("agent", [["--agent", "offline"], ["--agent", "random"], []])  # []: offline without a key
@pytest.mark.parametrize("flag", [["--model", "claude-x"], ["--budget", "5"]])
def test_the_claude_agents_flags_are_refused_with_another_agent(tmp_path, capsys, agent, flag):
    kind = agent[1] if agent else "offline"
    one_line_error(capsys, main(SEARCH + agent + flag + ["--session", str(tmp_path / "s")]),
                   flag[0], "--agent claude", kind)
    one_line_error(capsys, tui_main(agent + flag), flag[0], "--agent claude", kind)
    assert not (tmp_path / "s").exists()


def test_a_resume_with_another_agent_refuses_a_budget_too(tmp_path, capsys):
    session = session_with(tmp_path / "s", generations=3, done=1)
    one_line_error(capsys, main(["search", "--resume", str(session), "--agent", "offline", "--budget", "5"]),
                   "--budget", "--agent claude")


def test_the_claude_agent_takes_them(capsys):
    # refused for the missing key, the first thing the Claude agent needs: not for its flags
    one_line_error(capsys, main(SEARCH + ["--agent", "claude", "--model", "claude-x", "--budget", "5"]),
                   "ANTHROPIC_API_KEY")


# ---------------------------------------------------------------------------- cuco-tui --evaluate


def test_cuco_tui_evaluate_refuses_the_searchs_flags(capsys):
    err = one_line_error(capsys, tui_main(["--evaluate", "--generations", "5", "--review", "review", "--budget", "3",
                                           "--agent", "random"]),
                         "--generations", "--review", "--budget", "--agent", "--evaluate")
    assert "drop" in err


@pytest.mark.parametrize("flags", [["--resume", "s"], ["--model", "m"], ["--evaluations", "3"], ["--no-lookahead"],
                                   ["--keep-workers"], ["--no-keep-workers"]])
def test_cuco_tui_evaluate_refuses_each_search_flag(capsys, flags):
    one_line_error(capsys, tui_main(["--evaluate", *flags]), flags[0], "--evaluate")


def test_cuco_tui_evaluate_takes_the_workload_and_gpus(capsys, monkeypatch):
    from cuco_tui.app import app as app_module
    from cuco_tui.harness import gpus as gpus_module
    from cuco_tui.harness.gpus import GpuInfo, GpuInventory

    monkeypatch.setattr(gpus_module, "inventory", lambda: GpuInventory((GpuInfo(0, "NVIDIA H100", 81559, 132),)))
    opened = []
    monkeypatch.setattr(app_module.CucoApp, "run", lambda self: opened.append(self.start_search))
    assert tui_main(["--evaluate", "--workload", "gemm_allgather", "--gpus", "0"]) == 0, capsys.readouterr().err
    assert opened == [False]


def test_the_hint_after_the_evaluations_total_names_generations_when_none_is_left(tmp_path, capsys, monkeypatch):
    """A search that reached --evaluations in its last generation: the hint to evaluate more also
    asks for more generations (a resume with --evaluations alone would be refused)."""
    fast_search(monkeypatch)
    session = tmp_path / "e"
    assert main(SEARCH + ["--agent", "offline", "--generations", "1", "--evaluations", "3",
                          "--session", str(session)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "--evaluations N --generations M`, N above 3, M above 1" in out, out
    capsys.readouterr()
    assert main(["search", "--resume", str(session), "--agent", "offline", "--evaluations", "6",
                 "--generations", "2"]) == 0, capsys.readouterr().err
