"""The search dashboard: the search (a LiveSearch) runs in a thread worker; its events come
back as SearchEvent messages, are folded into a DashboardState (cuco_tui.app.search_state.apply),
and each widget is handed its part: the state panel, the proposal queue, the evaluations in
flight, the leaderboard, the speedup chart with the bound; a telemetry panel polls the GPUs in
its own thread. Keys steer the search through LiveSearch's controls (pause, resume, stop, review
and edit, hints, review mode, budget), each called from a short thread worker: the engine's lock
may be held across a git commit, and the event loop never waits on git. Enter on a leaderboard
row, or `o`, opens a committed candidate in the candidate screen, on its own handle to the
session, with the live search attached (re-benchmark, make parent); `/` moves the leaderboard
onto a candidate id; `t` profiles the highlighted candidate (app/profiles.py: once the search is
paused and what it had in flight committed; it is not resumed while the profile runs).

Stopping asks first (`x`, and `q` while proposals wait): proposals still waiting are recorded as
unreviewed and come back on resume. Esc does nothing here: the dashboard is the search, not a
screen to leave by accident. On a small terminal (below 110 columns or 36 lines) the panels
say less (class -narrow, -short); without a GPU the chart is one line."""

from __future__ import annotations

import threading
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Callable

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.events import Resize
from textual.widgets import Header, Static

from cuco_tui.app.commands import SearchCommands
from cuco_tui.app.live_search import LiveSearch
from cuco_tui.app.messages import SearchCrashed, SearchEvent
from cuco_tui.app.profiles import ProfileTarget, RunsProfiles, ask_profile
from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.app.search_state import DashboardState, RunPhase, apply
from cuco_tui.app.widgets.confirm import Confirm
from cuco_tui.app.widgets.gpu_banner import GpuBanner
from cuco_tui.app.widgets.search.editor import EditError, edit_source
from cuco_tui.app.widgets.search.in_flight import InFlightTable
from cuco_tui.app.widgets.search.leaderboard import Leaderboard
from cuco_tui.app.widgets.search.proposal_queue import ProposalQueue
from cuco_tui.app.widgets.search.speedup_chart import SpeedupChart
from cuco_tui.app.widgets.search.state_panel import StatePanel
from cuco_tui.app.widgets.telemetry.panel import TelemetryPanel
from cuco_tui.app.widgets.text_prompt import TextPrompt
from cuco_tui.app.widgets.key_bar import KeyBar
from cuco_tui.core.records import candidate_id_of, id_number
from cuco_tui.lineage import SessionError
from cuco_tui.search.config import REVIEW_MODES

# After "No GPU (reason): ", in two lines at 80 columns for the usual reasons (harness/gpus.inventory).
NO_GPU_SEARCH = ("candidates are compiled only (no_gpu), not verified or timed; b browses the example sessions "
                 "recorded on GPU hosts.")
NO_GPU_CHART = "Chart: nothing is timed without a GPU."
NARROW, SHORT, WIDE = 110, 36, 140  # below NARROW columns / SHORT lines the panels say less; from WIDE on
# the left column (state, leaderboard, evaluations) is wider


class DashboardScreen(Screen):
    # Quit, Open, Stop and Browse first: a narrow footer shows the keys in this order and cuts the
    # rest (the palette, ^p, has every action by its long name).
    BINDINGS = [
        Binding("q", "app.quit", "Quit"),
        Binding("o", "open_candidate", "Open"),
        Binding("x", "stop", "Stop"),
        Binding("b", "app.browse", "Browse"),
        Binding("y", "accept", "Accept"),
        Binding("n", "reject", "Reject"),
        Binding("e", "edit", "Edit"),
        Binding("a", "accept_all", "All"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("m", "cycle_review_mode", "Review"),
        Binding("h", "hint", "Hint"),
        Binding("dollar_sign", "budget", "Budget", key_display="$"),
        Binding("l", "app.lineage", "Lineage"),
        Binding("slash", "jump", "Go to id", key_display="/"),
        Binding("t", "profile", "Profile"),
    ]
    COMMANDS = {SearchCommands}

    state: reactive[DashboardState] = reactive(DashboardState, always_update=True)

    def __init__(self, search: LiveSearch, **kwargs) -> None:
        """`search`: not started yet; the dashboard starts it, runs it and closes it."""
        super().__init__(**kwargs)
        self.search = search
        self._unsubscribe: Callable[[], None] | None = None
        self._started = False
        self._quit_when_finished = False  # set by the first `q` while evaluations run
        self._mode_lock = threading.Lock()
        self._wanted_mode = search.launch.config.review_mode

    def compose(self) -> ComposeResult:
        yield Header()
        yield GpuBanner(NO_GPU_SEARCH, id="no-gpu-banner")
        with Horizontal(id="dashboard-body"):
            with Vertical(id="dashboard-left"):
                yield StatePanel(id="state-panel")
                yield Leaderboard(id="leaderboard")
                yield InFlightTable(id="in-flight")
            with Vertical(id="dashboard-right"):
                yield ProposalQueue(id="proposals")
                yield Static(NO_GPU_CHART, id="chart-line")
                yield SpeedupChart(id="speedup-chart")
                yield TelemetryPanel(id="telemetry")
        yield KeyBar()

    def on_mount(self) -> None:
        launch = self.search.launch
        what = f"resuming {launch.resume.name}" if launch.resume else launch.workload.name
        self.sub_title = f"search · {what} · agent {launch.agent_kind}"
        self.state = replace(self.state, review_mode=launch.config.review_mode, islands=launch.config.islands,
                             generations=launch.config.generations, budget=launch.config.budget_usd)
        if not self._started:
            self._started = True
            self._unsubscribe = self.search.events.subscribe(lambda e: self.post_message(SearchEvent(e)),
                                                             replay=True)
            self._run_search()
        self.query_one("#leaderboard-table").focus()  # enter opens the highlighted candidate
        self._fit(self.size.width, self.size.height)

    def on_resize(self, event: Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        narrow, short = width < NARROW, height < SHORT
        self.set_class(narrow, "-narrow")
        self.set_class(width >= WIDE, "-wide")
        self.set_class(short, "-short")
        self.query_one(StatePanel).compact = short or narrow
        self.query_one(ProposalQueue).compact = short or narrow
        self.query_one(Leaderboard).compact = short
        self.query_one(InFlightTable).compact = short

    def on_unmount(self) -> None:
        self.search.stop()
        if self._unsubscribe is not None:
            self._unsubscribe()

    def watch_state(self, old: DashboardState, new: DashboardState) -> None:
        """Hand each widget its part of the state (the proposal queue mounts rows: the event
        handler awaits it); say what the engine reported; quit once finished if `q` asked."""
        if not self.is_mounted:
            return
        self.query_one(StatePanel).state = new
        if new.evaluations is not old.evaluations or new.builds_queued != old.builds_queued:
            self.query_one(InFlightTable).show(new.evaluations, new.builds_queued)
        if new.points is not old.points:
            self.query_one(SpeedupChart).points = new.points
        if new.bounds is not old.bounds:
            self.query_one(SpeedupChart).bound = new.bounds.speedup if new.bounds is not None else None
        if new.board is not old.board or new.bounds is not old.bounds or new.work is not old.work:
            self.query_one(Leaderboard).show(new.board, new.bounds, new.work, shape_names(new))
        if new.can_measure is not old.can_measure:
            self.set_class(new.can_measure is False, "-no-gpu")  # the chart folds to one line
        for notice in new.notices[len(old.notices):]:
            self.notify(notice, title="plateau", severity="warning", timeout=15)
        if new.session and new.session != old.session:
            how = f", resumed at generation {new.resumed_at}" if new.resumed_at is not None else ""
            self.sub_title = f"search · {new.workload} · session {Path(new.session).name}{how} · agent {new.agent}"
        for error in new.errors[len(old.errors):]:
            self.notify(error, title="search", severity="error")
        if self._quit_when_finished and new.ended and not old.ended:
            self.app.exit()

    # --- the search's thread --------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="search", name="search", exit_on_error=False)
    def _run_search(self) -> None:
        from cuco_tui.agents.factory import AgentUnavailable
        from cuco_tui.core.workload import WorkloadError
        from cuco_tui.executors import PlacementError
        from cuco_tui.lineage import SessionError

        try:
            self.search.start()
            self.search.run()
        except (AgentUnavailable, PlacementError, WorkloadError, SessionError) as exc:  # refused: nothing was created
            self.post_message(SearchCrashed(f"cannot search: {exc}"))
        except Exception as exc:
            self.app.log.error(traceback.format_exc())
            self.post_message(SearchCrashed(f"the search stopped: {type(exc).__name__}: {exc}"))
        finally:
            self.search.close()

    # --- events ---------------------------------------------------------------------------------

    async def on_search_event(self, message: SearchEvent) -> None:
        old = self.state
        self.state = new = apply(old, message.event)
        if new.proposals is not old.proposals:
            await self.query_one(ProposalQueue).show(new.proposals)

    def on_search_crashed(self, message: SearchCrashed) -> None:
        self.state = replace(self.state, run=RunPhase.FAILED)
        self.notify(message.error, title="search", severity="error", timeout=15)

    # --- steering -------------------------------------------------------------------------------

    def _ready(self) -> LiveSearch | None:
        """The search, when it can be steered (else a notification says why not)."""
        if self.state.over:
            self.notify(f"the search is over ({self.state.run_text})", severity="warning")
            return None
        if not self.search.started:
            self.notify("the search is still starting", severity="warning")
            return None
        return self.search

    @work(thread=True, group="controls", exit_on_error=False)
    def _control(self, what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:  # ReviewError, ConfigError: a sentence for the engineer
            self.app.call_from_thread(self.notify, str(exc), title=what, severity="warning")

    def _selected(self) -> tuple[LiveSearch, str] | None:
        """The search and the proposal selected for review (else a notification says why not)."""
        search, cid = self._ready(), self.query_one(ProposalQueue).selected
        if search is None:
            return None
        if cid is None:
            self.notify("no proposal is waiting for review", severity="warning")
            return None
        return search, cid

    def action_accept(self) -> None:
        chosen = self._selected()
        if chosen is None:
            return
        search, cid = chosen
        self._control("accept", lambda: search.review(cid, "accept"))

    def action_accept_all(self) -> None:
        search, ids = self._ready(), self.query_one(ProposalQueue).ids
        if search is None:
            return
        if not ids:
            self.notify("no proposal is waiting for review", severity="warning")
            return

        def accept_all() -> None:
            for cid in ids:
                search.review(cid, "accept")

        self._control("accept all", accept_all)

    def action_reject(self) -> None:
        chosen = self._selected()
        if chosen is None:
            return
        search, cid = chosen

        def rejected(reason: str | None) -> None:
            if reason is not None:
                self._control("reject", lambda: search.review(cid, "reject", reason))

        self.app.push_screen(TextPrompt(f"Why reject {cid}?", "the reason goes into the lineage"), rejected)

    def action_edit(self) -> None:
        """The selected proposal in $EDITOR; the edited code is evaluated instead of the agent's."""
        search, cid = self._ready(), self.query_one(ProposalQueue).selected
        if search is None:
            return
        proposal = self.query_one(ProposalQueue).proposal(cid) if cid else None
        if proposal is None:
            self.notify("no proposal is waiting for review", severity="warning")
            return
        try:
            edited = edit_source(self.app, proposal.source, f"{proposal.candidate}.cu")
        except EditError as e:
            self.notify(str(e), title="edit", severity="warning")
            return
        if edited == proposal.source:
            self.notify(f"{cid} unchanged: still waiting for review")
            return
        if not edited.strip():
            self.notify(f"the edit of {cid} is empty: nothing sent", severity="warning")
            return
        self._control("edit", lambda: search.review(cid, "edit", "edited in $EDITOR", edited))

    def action_toggle_pause(self) -> None:
        search = self._ready()
        if search is None:
            return
        running = self.app.profiles.profiler.running if isinstance(self.app, RunsProfiles) else None
        if search.paused and running is not None:  # its evaluations would time beside the profile
            self.notify(f"a profile of {running.describe()} is running on the GPUs: resume when it ends",
                        title="pause", severity="warning")
            return
        self._control("pause", search.resume if search.paused else search.pause)

    def action_profile(self) -> None:
        """`t`: a profile of the candidate the leaderboard highlights (else the best)."""
        session = self.search.session
        board = {e.candidate: e for e in self.state.board}
        chosen = self.query_one(Leaderboard).highlighted or self.state.best_id
        if session is None or chosen not in board:
            self.notify("no committed candidate to profile yet", severity="warning")
            return
        workload = self.state.workload or self.search.launch.workload.name
        ask_profile(self, ProfileTarget(session, chosen, board[chosen].status, workload))

    def action_cycle_review_mode(self) -> None:
        search = self._ready()
        if search is None:
            return
        previous = self.state.review_mode
        mode = REVIEW_MODES[(REVIEW_MODES.index(previous) + 1) % len(REVIEW_MODES)]
        # Shown at once: the engine may hold its lock across a git commit (hundreds of ms on a
        # loaded machine), and the key must be answered within 100 ms; undone if refused.
        self.state = replace(self.state, review_mode=mode)

        self._wanted_mode = mode

        def switch() -> None:
            # Workers of quick presses may reach the engine in any order: whichever applies last
            # applies the latest mode asked for, read under this lock.
            with self._mode_lock:
                wanted = self._wanted_mode
                try:
                    search.set_review_mode(wanted)
                except Exception:
                    self.app.call_from_thread(self._mode_set, previous, False)
                    raise
            self.app.call_from_thread(self._mode_set, wanted, True)

        self._control("review mode", switch)

    def _mode_set(self, mode: str, applied: bool) -> None:
        # No toast when applied: the state panel shows the mode, and mounting a toast per press
        # delayed the next key by tens of ms on a loaded machine.
        self.state = replace(self.state, review_mode=mode)

    def action_hint(self) -> None:
        search = self._ready()
        if search is None:
            return
        if self.state.hints_unread:  # said in one line, not prompted for and counted in vain
            self.notify(self.state.hints_unread, title="hint", severity="warning")
            return

        def hinted(text: str | None) -> None:
            if text and text.strip():
                self._control("hint", lambda: search.add_hint(text))

        self.app.push_screen(TextPrompt("A hint for the agent:", "e.g. try chunked overlap"), hinted)

    def action_budget(self) -> None:
        """Change the dollar cap: a number (the new cap), +N (N more than now), or none (no cap)."""
        search = self._ready()
        if search is None:
            return
        s = self.state
        now = f"${s.budget:.2f}" if s.budget is not None else "no cap"

        def answered(text: str | None) -> None:
            if text is None or not text.strip():
                return
            try:
                usd = parse_budget(text, s.budget)
            except ValueError as e:
                self.notify(str(e), title="budget", severity="warning")
                return
            self._control("budget", lambda: search.set_budget(usd))
            self.notify("budget: no cap" if usd is None else f"budget: ${usd:.2f} (spent ${s.spent:.2f})")

        self.app.push_screen(TextPrompt(f"Budget in dollars (spent ${s.spent:.2f}; cap now {now}):",
                                        "e.g. 5, +2 for two more, none to lift the cap"), answered)

    def action_open_candidate(self) -> None:
        """The candidate the leaderboard highlights (else the best, else the last committed) in
        the candidate screen, at once: `o` opens, on every screen; `/` goes to an id first."""
        if not self.search.started:
            self.notify("the search is still starting", severity="warning")
            return
        committed = self.state.sources
        if not committed:
            self.notify("no candidate is committed yet", severity="warning")
            return
        chosen = self.query_one(Leaderboard).highlighted or self.state.best_id or max(committed, key=id_number)
        self.go_to_candidate(chosen)

    def action_jump(self) -> None:
        """Ask for a candidate id (c0030, c30, 0030 or 30) and move the leaderboard onto it."""
        def answered(text: str | None) -> None:
            if text is None or not text.strip():
                return
            cid = candidate_id_of(text)
            if cid is None or cid not in self.query_one(Leaderboard).candidates:
                self.notify(f"no committed candidate {text.strip()!r} in this search", severity="warning")
                return
            self.query_one(Leaderboard).select(cid)
            self.notify(f"{cid} highlighted on the leaderboard: o or enter opens it")

        self.app.push_screen(TextPrompt("Go to which candidate?", "e.g. c0007 or 7"), answered)

    def on_leaderboard_chosen(self, message: Leaderboard.Chosen) -> None:
        self.go_to_candidate(message.candidate)

    def candidate_choices(self) -> list[tuple[str, str]]:
        """(label, id) of every committed candidate, best first: the palette's go-to entries."""
        out = []
        for e in self.state.board:
            speed = f" {e.speedup:.2f}x" if e.measured and e.speedup is not None else ""
            out.append((f"Open candidate {e.candidate} · {e.status}{speed} · {e.strategy}", e.candidate))
        return out

    def go_to_candidate(self, cid: str) -> None:
        if not self.search.started:
            self.notify("the search is still starting", severity="warning")
        elif cid not in self.state.sources:
            self.notify(f"no committed candidate {cid!r} in this search", severity="warning")
        else:
            self._open_candidate(cid)

    @work(thread=True, group="open-candidate", exit_on_error=False)
    def _open_candidate(self, cid: str) -> None:
        # Its own handle: the search's closes when the search ends, and the screen may outlive it.
        try:
            repo = self.search.open_repo()
        except SessionError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error")
            return
        self.app.call_from_thread(self.app.push_screen,
                                  CandidateScreen(repo, cid, search=self.search, owns_repo=True))

    def action_stop(self) -> None:
        """Stop the search, once the engineer said yes: what runs is committed, what waits for
        review is recorded as unreviewed."""
        search = self._ready()
        if search is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.state = replace(self.state, run=RunPhase.STOPPING)
                self._control("stop", search.stop)

        self.app.push_screen(Confirm("Stop the search?", self._stop_detail("No new proposal is asked for."),
                                     yes="Stop", no="Go on"), answered)

    def _stop_detail(self, first: str) -> str:
        s = self.state
        session = Path(s.session).name if s.session else "SESSION"
        parts = [first]
        if s.in_flight and s.executor:  # cluster jobs are cancelled, not waited for
            parts.append(f"{s.in_flight} evaluation job(s) are cancelled; a resume evaluates them again.")
        elif s.in_flight:
            parts.append(f"{s.in_flight} evaluation(s) in flight finish and are committed.")
        if s.held:
            parts.append(f"{s.held} proposal(s) waiting for review are recorded as unreviewed (not rejected) and "
                         "come back for review when the search is resumed.")
        parts.append(f"Resume with: cuco-tui --resume {session}")
        return " ".join(parts)

    def quit_after_search(self) -> bool:
        """`q` while the search runs: with proposals waiting, ask first, then stop and quit once
        everything is committed (the waiting ones as unreviewed); with evaluations in flight only,
        stop and quit once they are committed (nothing is lost). False when there is nothing to
        wait for: quit now."""
        if not self.search.running or self.state.over:
            return False
        if self.state.held:
            def answered(yes: bool | None) -> None:
                if yes:
                    self._stop_then_quit()

            self.app.push_screen(Confirm(f"Quit? {self.state.held} proposal(s) wait for your review.",
                                         self._stop_detail("The search stops first."), yes="Quit", no="Stay"),
                                 answered)
            return True
        if self.state.in_flight == 0:
            return False
        self._stop_then_quit()
        if self.state.executor:
            self.notify(f"Stopping: {self.state.in_flight} evaluation job(s) are cancelled (a resume evaluates them "
                        "again), then cuco-tui quits.", title="quit", timeout=30)
        else:
            self.notify(f"Stopping: {self.state.in_flight} evaluation(s) in flight finish and are committed, then "
                        "cuco-tui quits. Press q again to quit now (the process still waits for them to end, "
                        "each within its time limit).", title="quit", timeout=30)
        return True

    @property
    def quitting(self) -> bool:
        """True once `q` stopped the search to quit when it is over (a second `q` quits now)."""
        return self._quit_when_finished

    def _stop_then_quit(self) -> None:
        self._quit_when_finished = True
        self.state = replace(self.state, run=RunPhase.STOPPING)
        self._control("stop", self.search.stop)


def shape_names(s: DashboardState) -> list[str]:
    """The bench shapes the leaderboard has columns for: the bounds', then the measured ones',
    in the order first seen (the session's own workload, which a resumed search may not share
    with the app's default)."""
    names = [b.shape for b in s.bounds.shapes] if s.bounds is not None else []
    names += list(s.work)
    for entry in s.board:
        names += [t.shape for t in entry.timings]
    return list(dict.fromkeys(names))


def parse_budget(text: str, current: float | None) -> float | None:
    """The cap a budget answer asks for: "5" or "$5" sets it, "+2" raises the current cap (or
    the first cap) by 2, "none" lifts it. ValueError with a sentence otherwise."""
    text = text.strip().lower().replace("$", "")
    if text in ("none", "no", "off", "unlimited"):
        return None
    raise_by = text.startswith("+")
    try:
        usd = float(text[1:] if raise_by else text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of dollars (e.g. 5, +2, none)") from None
    if usd < 0 or usd != usd:
        raise ValueError(f"the budget is 0 dollars or more, not {text}")
    return (current or 0.0) + usd if raise_by else usd
