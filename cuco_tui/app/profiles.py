"""Profiles on request (`t` on a selected candidate: the candidate view, the lineage, the dashboard's
leaderboard): the app's one owner of them. It refuses in one line what cannot be profiled (a
failed or never evaluated candidate, a bundle's temporary copy, a profile already running, a live
search evaluating on the GPUs, a machine without a GPU), asks which bench shape (ShapePicker),
then runs the profile outside the TUI's process (app/profile_run.py: `cuco eval ID --session S
--profile SHAPE`, which keeps it under refs/profiles/<id>) in a thread worker that waits on it.
Screens hear ProfileStarted and ProfileFinished; the candidate view of that candidate counts the
time up and reads the candidate again from its session when the profile is kept.

Why a live search must not be evaluating: the profile's evaluation times the candidate and records
its launches on this machine's GPUs, and the search's evaluations would run on the same ones at
the same moment, spoiling both measurements. A paused search starts nothing new, so once what it
had in flight is committed the GPUs are free; the dashboard does not resume it while a profile runs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from textual.app import App
from textual.message import Message
from textual.screen import Screen

from cuco_tui.app.live_search import LiveSearch
from cuco_tui.app.messages import ProfileFinished, ProfileStarted
from cuco_tui.app.profile_run import (ProfileBusy, ProfileEnded, Profiler, ProfileRequest, status_refusal,
                                      temporary_refusal)
from cuco_tui.app.widgets.shape_picker import ShapePicker
from cuco_tui.core.workload import Shape

KEY = "t"  # the profile key on every screen that selects a candidate (p is the dashboard's pause)
TITLE = "profile"
SEARCH_BUSY = ("pause the search first (p on the dashboard) and let its evaluations in flight finish: a profile "
               "must not time on the GPUs beside them")


@dataclass(frozen=True)
class ProfileTarget:
    """The candidate a screen has selected, as much as the profile key needs of it."""

    session: Path  # the session folder
    candidate_id: str
    status: str  # its record's status
    workload: str  # the session's workload
    temporary: bool = False  # the session is a bundle's temporary import (SessionRepo.temporary)


def clock(seconds: float) -> str:
    """0:42, 12:05: elapsed time as the in-flight table writes it."""
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d}"


def same_session(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


class Profiles:
    """`app`: the app whose workers, notifications and screens it uses; `profiler`: runs the
    profiles (a test hands in its own command); `search`: the app's live search, if any."""

    def __init__(self, app: App, profiler: Profiler, search: Callable[[], LiveSearch | None]) -> None:
        self._app = app
        self.profiler = profiler
        self._search = search

    # ---- asking (the event loop) -------------------------------------------------------------

    def ask(self, target: ProfileTarget) -> None:
        """The profile key on `target`: refused in one line, else the shape is asked for (after
        the GPUs are read, in a thread, and the GPUs found free) and the profile started."""
        refusal = status_refusal(target.candidate_id, target.status)
        if not refusal and target.temporary:
            refusal = temporary_refusal(target.candidate_id)
        if refusal:
            self._app.notify(refusal, title=TITLE, severity="warning")
            return
        self._app.run_worker(partial(self._prepare, target), thread=True, group="profile-ask", exclusive=True,
                             exit_on_error=False)

    def busy(self) -> str:
        """Why no profile can start now ("" when one can)."""
        running = self.profiler.running
        if running is not None:
            return (f"a profile of {running.describe()} is running ({clock(self.profiler.elapsed())}): one at a time, "
                    "on the same GPUs")
        search = self._search()
        if search is not None and search.gpus_busy:
            return SEARCH_BUSY
        return ""

    def cancel(self) -> None:
        """End a running profile (the app quits): nothing of it is kept."""
        self.profiler.cancel()

    def _prepare(self, target: ProfileTarget) -> None:
        """In a thread: the GPUs (NVML) and the workload's bench shapes, then the shape picker."""
        from cuco_tui.core.workload import WorkloadError
        from cuco_tui.workload.manifest import load_workload

        refusal = self.profiler.gpu_refusal()
        shapes: tuple[Shape, ...] = ()
        if not refusal:
            try:
                shapes = load_workload(target.workload).bench_shapes
            except WorkloadError as exc:  # a bundle of a workload this checkout lacks
                refusal = f"cannot profile {target.candidate_id}: {exc}"
            else:
                refusal = "" if shapes else f"{target.workload} has no bench shapes to profile at"
        if refusal:
            self._from_thread(self._app.notify, refusal, title=TITLE, severity="warning")
            return
        self._from_thread(self._pick, target, shapes)

    def _pick(self, target: ProfileTarget, shapes: tuple[Shape, ...]) -> None:
        refusal = self.busy()  # after the GPUs: on a machine without one, that is the reason to give
        if refusal:
            self._app.notify(refusal, title=TITLE, severity="warning")
            return
        picker = ShapePicker(f"Profile {target.candidate_id} at which bench shape of {target.workload}?", shapes)
        self._app.push_screen(picker, partial(self._chosen, target))

    def _chosen(self, target: ProfileTarget, shape: str | None) -> None:
        if shape is None:  # escaped: nothing happens
            return
        refusal = self.busy()  # asked again: the search may have resumed meanwhile
        if refusal:
            self._app.notify(refusal, title=TITLE, severity="warning")
            return
        request = ProfileRequest(Path(target.session).resolve(), target.candidate_id, shape)
        self._app.run_worker(partial(self._run, request), thread=True, group="profile", exit_on_error=False)

    # ---- running (a thread worker) -----------------------------------------------------------

    def _run(self, request: ProfileRequest) -> None:
        try:
            ended = self.profiler.run(request, started=lambda: self._from_thread(self._started, request))
        except ProfileBusy as exc:  # two asked within a moment: the second says so
            self._from_thread(self._app.notify, str(exc), title=TITLE, severity="warning")
            return
        said, ok = self._outcome(ended)
        self._from_thread(self._finished, ended, said, ok)

    def _started(self, request: ProfileRequest) -> None:
        self._tell(lambda: ProfileStarted(request))
        self._app.notify(f"profiling {request.describe()} in a process of its own: it compiles, verifies and times "
                         "the candidate, then records 5 launches on the GPUs", title=TITLE)

    def _finished(self, ended: ProfileEnded, said: str, ok: bool) -> None:
        self._tell(lambda: ProfileFinished(ended))
        self._app.notify(said, title=TITLE, severity="information" if ok else ("error" if not ended.ok else "warning"),
                         timeout=15)

    def _outcome(self, ended: ProfileEnded) -> tuple[str, bool]:
        """The sentence the end is told in, and whether a profile with timelines was kept; a
        kept profile is read back from the session (blocking: git)."""
        request, took = ended.request, clock(ended.seconds)
        if not ended.ok:
            return f"the profile of {request.describe()} failed after {took}: {ended.reason}", False
        from cuco_tui.lineage import SessionError, SessionRepo
        from cuco_tui.lineage.profiles import stored_profile

        try:
            with SessionRepo.open(request.session) as repo:
                profile = stored_profile(repo, request.candidate_id)
        except SessionError as exc:
            return f"the profile of {request.describe()} ended, and reading it back failed: {exc}", False
        if profile is None:
            return (f"the profile of {request.describe()} ended after {took} without keeping a profile with "
                    f"{request.candidate_id}"), False
        if not profile.ok:
            return f"no profile of {request.describe()} taken ({took}): {profile.problem}", False
        worst = max(profile.ranks, key=lambda r: r.exposed_pct)
        return (f"profile of {request.describe()} kept ({took}): exposed communication {worst.exposed_pct:.1f}% of "
                f"the span on rank {worst.rank}; the candidate view's Profile tab has every rank"), True

    def _tell(self, message: Callable[[], Message]) -> None:
        """A message of its own to each screen on the stack (each decides whether it concerns it)."""
        for screen in self._app.screen_stack:
            screen.post_message(message())

    def _from_thread(self, fn: Callable[..., object], *args: object, **kwargs: object) -> None:
        try:
            self._app.call_from_thread(fn, *args, **kwargs)
        except RuntimeError:  # the app has quit meanwhile: nobody left to tell
            pass


@runtime_checkable
class RunsProfiles(Protocol):
    """An app with profiles on request (CucoApp): the screens' key asks it."""

    profiles: Profiles


def ask_profile(screen: Screen, target: ProfileTarget) -> None:
    """A screen's `t`: its app's profiles ask for a shape (or say why not); an app without them
    says so in one line."""
    app = screen.app
    if not isinstance(app, RunsProfiles):
        screen.notify("this app runs no profiles", severity="warning")
        return
    app.profiles.ask(target)
