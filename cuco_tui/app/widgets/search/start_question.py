"""What `s` asks before it starts a search the engineer did not start from the command line
(`cuco-tui open`, `cuco-tui --evaluate`): the workload, the generations, where the candidates
run, the agent and the session, in words. Pure: the GPUs are read by the caller, in a thread."""

from __future__ import annotations

from collections import Counter

from cuco_tui.app.search_launch import SearchLaunch
from cuco_tui.harness.gpus import GpuInventory


def where_it_runs(launch: SearchLaunch, inventory: GpuInventory) -> str:
    """The GPUs the search would take, as it would take them: a sentence."""
    if launch.executor is not None:
        return "It runs on the executor given on the command line."
    named = list(launch.config.gpus)
    found = {g.index: g for g in inventory.gpus}
    if named:
        names = Counter(found[i].name for i in named if i in found)
        kinds = ", ".join(f"{n} x {name}" for name, n in names.items())
        return f"It runs on GPUs {','.join(map(str, named))}" + (f" ({kinds})." if kinds else ".")
    if not inventory.gpus:
        why = f" ({inventory.problem})" if inventory.problem else ""
        return f"No GPU on this machine{why}: every candidate is compiled only, nothing is timed."
    names = Counter(g.name for g in inventory.gpus)
    kinds = ", ".join(f"{n} x {name}" for name, n in names.items())
    return f"It runs on every GPU of this machine at once: {kinds} (GPUs {','.join(str(g.index) for g in inventory.gpus)})."


def start_question(launch: SearchLaunch, inventory: GpuInventory) -> tuple[str, str]:
    """(question, detail) for the confirmation."""
    config = launch.config
    if launch.resume is not None:
        question = f"Resume the search of session {launch.resume.name}?"
        what = f"Session {launch.resume.name} goes on to its last generation."
    else:
        question = f"Start a new search of {launch.workload.name}?"
        session = f"in {launch.session}" if launch.session is not None else f"in a new session under {launch.sessions_folder}"
        what = f"{config.generations} generations of {launch.workload.name}, {session}."
    return question, (f"{what} {where_it_runs(launch, inventory)} The {launch.agent_kind} agent proposes. "
                      "Nothing starts unless you say yes.")
