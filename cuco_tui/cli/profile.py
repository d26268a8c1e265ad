"""`cuco eval --profile SHAPE` and `--session`: the checks that refuse a profile before anything runs,
a session's candidate as the file to evaluate, and the profile printed and kept with the candidate
(lineage/profiles.py). The capture and its summary: harness/profile_capture.py, evaluate/profiling.py."""

from __future__ import annotations

import argparse
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from cuco_tui.core.errors import UsageError
from cuco_tui.core.profile import Profile
from cuco_tui.core.workload import Workload

PERFETTO = "https://ui.perfetto.dev"


def profile_shape(workload: Workload, args: argparse.Namespace, shapes: tuple[str, ...]) -> str | None:
    """--profile as a bench shape of the workload that this evaluation will time on GPUs of its
    own; each way it cannot be is refused in one sentence, before anything is compiled."""
    shape = args.profile
    if shape is None:
        return None
    known = [s.name for s in workload.bench_shapes]
    if shape not in known:
        raise UsageError(f"--profile: {workload.name} has no bench shape {shape!r}; its bench shapes are "
                         f"{', '.join(known)}")
    if args.share_gpu:
        raise UsageError("--profile takes a timeline of the candidate on GPUs of its own, and with --share-gpu its "
                         "ranks take turns on one GPU: drop one of them")
    if args.no_bench:
        raise UsageError("--profile records a bench shape once it is timed, and --no-bench times none: drop one of them")
    if args.sanitize:
        raise UsageError("--profile records a timed bench shape, and --sanitize only verifies (under a tool that "
                         "slows every launch): drop one of them")
    if shapes and shape not in shapes:
        raise UsageError(f"--profile {shape} is not among --shapes {','.join(shapes)}: add it there, or drop --shapes")
    from cuco_tui.harness.gpus import inventory

    inv = inventory()
    if inv.count == 0:
        raise UsageError(f"--profile records what the GPUs run, and this machine has none: "
                         f"{inv.problem or 'no GPU found'}")
    return shape


@dataclass(frozen=True)
class SessionCandidate:
    """A session's candidate, its source written out for the cascade."""

    session: Path
    candidate_id: str
    workload: str  # the session's
    file: Path


@contextmanager
def session_candidate(args: argparse.Namespace) -> Iterator[SessionCandidate | None]:
    """With --session, FILE is a candidate id of that session (a folder, a name under the sessions
    folder, or a .bundle, opened as `cuco show` opens it; the id spelled as there): its source in a
    temporary folder (removed after) as `<id>.cu`; without, None."""
    if args.session is None:
        yield None
        return
    from cuco_tui.cli.sessions import candidate_named, open_named, shown_as

    bundle = str(args.session).endswith(".bundle") and Path(args.session).is_file()
    if bundle and args.profile is not None:  # it would be kept in the temporary folder the bundle is read into
        raise UsageError(f"--profile keeps the profile in the session, and {args.session} is a bundle: `git clone "
                         f"{args.session}` and give the clone's folder to --session")
    from cuco_tui.lineage import SessionError

    with open_named(args) as repo:
        shown = shown_as(args, repo)
        cid = candidate_named(repo, args.file)
        if cid not in repo:
            raise UsageError(f"session {shown} has no candidate {args.file!r} (with --session, FILE is a candidate "
                             f"id, e.g. c0004; `cuco show {args.session}` lists them)")
        try:
            source = repo.source_of(cid)
        except SessionError as exc:
            raise UsageError(str(exc)) from exc
        workload = str(repo.session_info().get("workload", ""))
        path = Path(repo.path)
    with tempfile.TemporaryDirectory(prefix=f"cuco-{cid}-") as folder:
        file = Path(folder) / f"{cid}.cu"
        file.write_text(source)
        yield SessionCandidate(path, cid, workload, file)


def keep_in_session(candidate: SessionCandidate, profile: Profile) -> Profile:
    from cuco_tui.lineage import SessionError, SessionRepo
    from cuco_tui.lineage.profiles import keep_profile

    try:
        with SessionRepo.open(candidate.session) as repo:
            return keep_profile(repo, candidate.candidate_id, profile)
    except SessionError as exc:
        raise UsageError(f"the profile could not be kept in {candidate.session}: {exc}") from exc


def profile_lines(profile: Profile, kept: SessionCandidate | None = None) -> list[str]:
    """The profile as printed after the result: the summary, then where its trace is."""
    lines = profile.lines()
    if profile.ok and kept is not None:
        lines.append(f"kept with {kept.candidate_id} in {kept.session}: git -C {kept.session} show "
                     f"refs/profiles/{kept.candidate_id}:profile.trace.json > trace.json, then open it in {PERFETTO}")
    elif profile.ok and profile.trace:
        lines.append(f"trace: {profile.trace} (open it in {PERFETTO})")
    elif kept is not None:
        lines.append(f"kept with {kept.candidate_id} in {kept.session}, saying why there is no profile")
    return lines


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="SHAPE",
                   help="after timing, record what the GPUs run over 5 launches at this bench shape (CUPTI: "
                        "pip install 'cuco-tui[profile]') and print each rank's exposed communication; the trace "
                        f"(a Chrome trace for {PERFETTO}) goes into the run folder")
    p.add_argument("--session", metavar="SESSION",
                   help="FILE is a candidate id of this session (a folder, a name under the sessions folder, or a "
                        ".bundle); with --profile, the profile is kept with the candidate")
