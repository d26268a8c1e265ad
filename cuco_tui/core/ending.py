"""How a search ended, in the one vocabulary every reader uses: the engine's SearchFinished and
its summary, the session's `ended` record, `cuco sessions`, the TUI's browser and dashboard.

A search ends for a reason ("done", "evaluations", "stopped", "budget", "plateau", "agent exhausted",
"error", "interrupted"); its session is then in one of three states: `finished` (every generation it
was asked for ran, or it evaluated the candidates it was asked for), `exhausted` (the agent has
nothing new: a resume would end at once) or `stopped`
(a resume goes on: stopped by the engineer or Ctrl-C, out of budget, a plateau, whose patience a
resume gives again, an error, or killed, which records nothing)."""

from __future__ import annotations

FINISHED, EXHAUSTED, STOPPED = "finished", "exhausted", "stopped"
END_STATES = (FINISHED, EXHAUSTED, STOPPED)

# reasons that name their state by themselves ("stopped (stopped)" says nothing more)
_PLAIN = {"done": FINISHED, "agent exhausted": EXHAUSTED, "stopped": STOPPED}
_STATES = {**_PLAIN, "evaluations": FINISHED}  # the rest: stopped


def end_state(reason: str) -> str:
    """The state a search that ended for `reason` leaves its session in."""
    return _STATES.get(reason, STOPPED)


def describe_end(reason: str) -> str:
    """`reason` as a person reads it: "finished", "exhausted", "stopped", "stopped (budget)"."""
    state = end_state(reason)
    return state if reason in _PLAIN else f"{state} ({reason})"
