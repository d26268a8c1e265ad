"""The Claude agent: proposes candidates by asking a Claude model through the Messages API.

- `fast_path`: a full rewrite of the host-driven parent into a device-initiated one, then a
  judge call (same model unless `judge_model` says otherwise) that answers in a fixed format
  whether the rewrite is device-initiated and plausibly correct; up to `fast_path_iterations`
  rounds, each fed the judge's objections (or why the last reply was unusable). The last
  accepted rewrite comes back, or else the last usable attempt with the objections in its
  rationale.
- `diff`: SEARCH/REPLACE edits of the parent (a reply that holds a full rewrite instead is
  applied as one).
- `full`: a rewrite of the parent's EVOLVE blocks.
- `crossover`: 2-3 parents combined into one full rewrite.

Every reply goes through `edits.apply_diffs` / `edits.apply_full`, which end with the `screen`
the agent was given (the cascade's L0, wired by agents/factory.py); a reply that cannot be
used becomes a `Proposal` with `error` set and `source == ""`, never an exception. API failures that outlast the retries (or cannot be retried) come back the
same way. `BudgetExhausted` is raised before a call once the ledger has reached the cap; within
one `propose`, only its first call raises it (a fast path that runs out after its first call
returns what it has, and the next `propose` raises).

Retries are ours (the SDK's own are off): HTTP 429 (honouring `retry-after`), 529 and other
5xx, and connection errors or timeouts, with exponential backoff and jitter.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import anthropic

from cuco_tui.agents.base import BudgetExhausted, Proposal, ProposalRequest, StaticScreen, HostDrivenCheck
from cuco_tui.agents.claude.accounting import Charge, Ledger, Price
from cuco_tui.agents.claude.edits import (
    EditResult,
    apply_diffs,
    apply_full,
    explanation_of,
    has_diff_blocks,
    parse_fences,
)
from cuco_tui.agents.claude.prompts import Prompts, parse_judge
from cuco_tui.source.regions import design_of
from cuco_tui.core.records import CandidateRecord, RecordStatus
from cuco_tui.core.workload import Workload

__all__ = ["ClaudeAgent", "DEFAULT_MODEL", "CallResult"]

DEFAULT_MODEL = "claude-sonnet-4-6"  # 4-5 reaches end of life on 2026-11-30
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class CallResult:
    purpose: str
    text: str
    stop_reason: str | None
    charge: Charge
    retries: int
    request_id: str = ""


class _CallFailed(Exception):
    """A call that did not produce a reply: retries exhausted or a non-retryable error."""

    def __init__(self, sentence: str, retries: int, status: int | None = None) -> None:
        super().__init__(sentence)
        self.sentence = sentence
        self.retries = retries
        self.status = status


@dataclass
class _Tally:
    """The calls of one `propose` or `summarize`."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    retries: int = 0
    usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0

    def add(self, res: CallResult) -> None:
        self.retries += res.retries
        self.usd += res.charge.usd
        self.tokens_in += res.charge.tokens_in
        self.tokens_out += res.charge.tokens_out
        self.replies.append(res.text)
        self.calls.append({
            "purpose": res.purpose,
            "model": res.charge.model,
            "stop_reason": res.stop_reason,
            "tokens_in": res.charge.tokens_in,
            "tokens_out": res.charge.tokens_out,
            "usd": round(res.charge.usd, 6),
            "retries": res.retries,
            "request_id": res.request_id,
        })


class ClaudeAgent:
    uses_hints = True  # the engineer's hints go into every prompt

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        budget_usd: float | None = 5.0,
        max_tokens: int = 16000,
        client: Any = None,
        base_url: str | None = None,
        max_retries: int = 4,
        fast_path_iterations: int = 3,
        *,
        judge_model: str | None = None,
        summary_max_tokens: int = 2000,
        judge_max_tokens: int = 2000,
        summary_window: int = 24,
        temperature: float | None = None,
        timeout: float = 600.0,
        retry_base_delay: float = 1.0,
        retry_max_delay: float = 60.0,
        retry_after_cap: float = 300.0,
        api_key: str | None = None,
        prices: Mapping[str, Price] | None = None,
        prompts: Prompts | None = None,
        workload: Workload | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        screen: StaticScreen | None = None,
        host_driven: HostDrivenCheck | None = None,
    ) -> None:
        self.model = model
        self.judge_model = judge_model or model
        self.name = f"claude:{model}"
        self.max_tokens = int(max_tokens)
        self.judge_max_tokens = int(judge_max_tokens)
        self.summary_max_tokens = int(summary_max_tokens)
        self.summary_window = int(summary_window)
        self.max_retries = max(0, int(max_retries))
        self.fast_path_iterations = max(1, int(fast_path_iterations))
        self.temperature = temperature
        self.retry_base_delay = float(retry_base_delay)
        self.retry_max_delay = float(retry_max_delay)
        self.retry_after_cap = float(retry_after_cap)
        self.ledger = Ledger(model=model, cap_usd=budget_usd, prices=prices)
        self.prompts = prompts or Prompts()
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.screen = screen  # early L0 on every edited candidate; None: left to the cascade
        self.host_driven = host_driven  # the classifier's check of a fast-path result; None: the judge alone
        self.workload: Workload | None = workload  # the last workload proposed for (the summary's context)
        self.last_summary = ""
        self.last_error = ""
        self._seeds: dict[Path, str] = {}
        if client is None:
            kwargs: dict[str, Any] = {"max_retries": 0, "timeout": timeout}
            if base_url:
                kwargs["base_url"] = base_url
            if api_key:
                kwargs["api_key"] = api_key
            client = anthropic.Anthropic(**kwargs)
        self.client = client

    # ------------------------------------------------------------------ budget

    @property
    def spent_usd(self) -> float:
        return self.ledger.spent_usd

    @property
    def budget_usd(self) -> float | None:
        return self.ledger.cap_usd

    def set_budget(self, usd: float | None) -> None:
        """Set the dollar cap (None: no cap). Takes effect before the next call."""
        self.ledger.cap_usd = None if usd is None else max(0.0, float(usd))

    # ------------------------------------------------------------------ the Agent protocol

    def propose(self, request: ProposalRequest) -> Proposal:
        self.workload = request.workload
        if not request.parents:
            return self._failed(request, _Tally(), f"a {request.kind} proposal needs a parent candidate; none was given")
        if request.kind == "fast_path":
            return self._fast_path(request)
        if request.kind == "diff":
            return self._diff(request)
        if request.kind == "crossover" and len(request.parents) >= 2:
            return self._rewrite(request, "crossover")
        return self._rewrite(request, "full")

    def summarize(self, history: list[CandidateRecord]) -> str:
        """A meta-summary of the recent candidates (status, speedup, design, first diagnostics).
        Raises BudgetExhausted when the budget is spent; on an API failure returns the previous
        summary (and keeps the failure in `last_error`)."""
        recent = [r for r in history if r.status is not RecordStatus.PENDING][-self.summary_window:]
        if not recent:
            return self.last_summary
        tally = _Tally()
        system = (self.prompts.system(self.workload, role="summarizer") if self.workload is not None
                  else _SUMMARY_SYSTEM)
        try:
            res = self._call("summary", system, self.prompts.meta_summary(recent, previous=self.last_summary), tally,
                             max_tokens=self.summary_max_tokens)
        except _CallFailed as exc:
            self.last_error = exc.sentence
            return self.last_summary
        text = res.text.strip()
        if text:
            self.last_summary = text
        return self.last_summary

    # ------------------------------------------------------------------ kinds

    def _diff(self, request: ProposalRequest) -> Proposal:
        tally = _Tally()
        parent = request.parents[0]
        try:
            res = self._call("diff", self._system(request), self.prompts.proposal(request), tally)
        except _CallFailed as exc:
            return self._failed(request, tally, exc.sentence)
        edit = apply_diffs(parent.source, res.text, seed=self._seed(request), file_name=_file_name(request),
                           stop_reason=res.stop_reason, max_tokens=self.max_tokens, screen=self.screen)
        notes: list[str] = []
        if (not edit.ok and not has_diff_blocks(res.text) and res.stop_reason != "max_tokens"
                and any(f.has_markers for f in parse_fences(res.text))):
            full = apply_full(parent.source, res.text, seed=self._seed(request), file_name=_file_name(request),
                              stop_reason=res.stop_reason, max_tokens=self.max_tokens, screen=self.screen)
            notes.append("the reply held a full rewrite of the blocks instead of SEARCH/REPLACE edits; "
                         "it was applied as one")
            edit = full
        return self._proposal(request, edit, explanation_of(res.text), tally, notes=notes)

    def _rewrite(self, request: ProposalRequest, kind: str) -> Proposal:
        tally = _Tally()
        parent = request.parents[0]
        try:
            res = self._call(kind, self._system(request), self.prompts.proposal(request), tally)
        except _CallFailed as exc:
            return self._failed(request, tally, exc.sentence)
        edit = apply_full(parent.source, res.text, seed=self._seed(request), file_name=_file_name(request),
                          stop_reason=res.stop_reason, max_tokens=self.max_tokens, screen=self.screen)
        return self._proposal(request, edit, explanation_of(res.text), tally)

    def _fast_path(self, request: ProposalRequest) -> Proposal:
        tally = _Tally()
        parent = request.parents[0]
        system, judge_system = self._system(request), self.prompts.system(request.workload, role="judge")
        objections: tuple[str, ...] = ()
        previous_source, previous_error = "", ""
        best: tuple[EditResult, str] | None = None  # the last usable attempt and its rationale
        best_objections: tuple[str, ...] = ()  # the judge's objections to it
        last_failure: EditResult | None = None  # the last unusable reply
        rounds: list[dict[str, Any]] = []
        stopped = ""
        for attempt in range(1, self.fast_path_iterations + 1):
            prompt = self.prompts.fast_path(request, attempt, previous_source, objections, previous_error)
            try:
                res = self._call("fast_path", system, prompt, tally)
            except BudgetExhausted:
                if attempt == 1:
                    raise
                stopped = "the budget ran out"
                break
            except _CallFailed as exc:
                if best is None and attempt == 1:
                    return self._failed(request, tally, exc.sentence)
                stopped = exc.sentence
                break
            edit = apply_full(parent.source, res.text, seed=self._seed(request), file_name=_file_name(request),
                              stop_reason=res.stop_reason, max_tokens=self.max_tokens, screen=self.screen)
            rationale = explanation_of(res.text)
            if not edit.ok:
                rounds.append({"attempt": attempt, "error": edit.error})
                previous_error, previous_source, objections = edit.error, edit.draft, ()
                last_failure = edit
                continue
            best, best_objections = (edit, rationale), ()
            try:
                verdict_reply = self._call("judge", judge_system,
                                           self.prompts.judge(request, edit.source, rationale), tally,
                                           model=self.judge_model, max_tokens=self.judge_max_tokens)
            except BudgetExhausted:
                stopped = "the budget ran out before the judge could review the last attempt"
                rounds.append({"attempt": attempt, "judged": False})
                break
            except _CallFailed as exc:
                stopped = f"the judge call failed: {exc.sentence}"
                rounds.append({"attempt": attempt, "judged": False})
                break
            verdict = parse_judge(verdict_reply.text)
            rounds.append({"attempt": attempt, "accepted": verdict.accept, "device_initiated": verdict.device_initiated,
                           "correct": verdict.correct, "reasons": list(verdict.objections)})
            still = self.host_driven(edit.source) if verdict.accept and self.host_driven else ""
            if still:  # the judge said yes; the code says the bytes still move by host collectives
                objection = (f"the static classifier finds the communication still host-driven ({still}); move "
                             f"the data with device-initiated code (LSA stores, CUDA-IPC peer stores or loads)")
                rounds[-1].update(accepted=False, classifier=still)
                objections, previous_source, previous_error = (objection,), edit.source, ""
                best_objections = objections
                continue
            if verdict.accept:
                why = rationale
                if verdict.reasons:
                    why += "\n\nThe judge accepted it:\n" + "\n".join(f"- {r}" for r in verdict.reasons)
                return self._proposal(request, edit, why.strip(), tally,
                                      extra={"judge": "accepted", "attempts": attempt, "rounds": rounds})
            objections, previous_source, previous_error = verdict.objections, edit.source, ""
            best_objections = verdict.objections
        extra = {"judge": "not accepted", "attempts": len(rounds), "rounds": rounds}
        if stopped:
            extra["stopped"] = stopped
        if best is None:
            if last_failure is None:
                failure = EditResult(error=stopped or "no usable rewrite came back")
            elif stopped:
                failure = replace(last_failure, error=f"{last_failure.error}; then {stopped}")
            else:
                failure = last_failure
            return self._proposal(request, failure, "", tally, extra=extra)
        edit, rationale = best
        if best_objections:
            rationale += ("\n\nThe judge did not accept this rewrite; its objections:\n"
                          + "\n".join(f"- {o}" for o in best_objections))
        elif stopped:
            rationale += f"\n\nNot reviewed: {stopped}."
        return self._proposal(request, edit, rationale.strip(), tally, extra=extra)

    # ------------------------------------------------------------------ the call

    def _call(self, purpose: str, system: str, prompt: str, tally: _Tally, *, model: str | None = None,
              max_tokens: int | None = None) -> CallResult:
        self.ledger.ensure_budget()
        model = model or self.model
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens or self.max_tokens,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": prompt}],
        }
        if self.temperature is not None:
            params["temperature"] = self.temperature
        retries = 0
        while True:
            try:
                message = self.client.messages.create(**params)
                break
            except anthropic.APIStatusError as exc:
                status = exc.status_code
                if status in RETRY_STATUSES and retries < self.max_retries:
                    wait = self._backoff(retries, _retry_after(exc))
                    retries += 1
                    self.sleep(wait)
                    continue
                tally.retries += retries
                what = _status_text(exc)
                if status in RETRY_STATUSES:
                    raise _CallFailed(f"the Claude API call ({purpose}) failed after {retries} "
                                      f"retr{'y' if retries == 1 else 'ies'}: {what}", retries, status) from exc
                raise _CallFailed(f"the Claude API refused the {purpose} call: {what}", retries, status) from exc
            except anthropic.APIConnectionError as exc:  # includes timeouts
                if retries < self.max_retries:
                    wait = self._backoff(retries, None)
                    retries += 1
                    self.sleep(wait)
                    continue
                tally.retries += retries
                kind = "timed out" if isinstance(exc, anthropic.APITimeoutError) else "could not connect"
                raise _CallFailed(f"the Claude API call ({purpose}) {kind} after {retries} "
                                  f"retr{'y' if retries == 1 else 'ies'}: {exc}", retries) from exc
            except TypeError as exc:
                if "authentication" in str(exc).lower() or "api_key" in str(exc).lower():
                    raise _CallFailed("no Anthropic API key: set ANTHROPIC_API_KEY (or pass api_key=) to use the "
                                      "Claude agent", retries) from exc
                raise
        text = "".join(getattr(b, "text", "") for b in (message.content or []) if getattr(b, "type", "") == "text")
        charge = self.ledger.charge(getattr(message, "usage", None), model=model, purpose=purpose)
        res = CallResult(purpose, text, getattr(message, "stop_reason", None), charge, retries,
                         str(getattr(message, "id", "") or ""))
        tally.add(res)
        return res

    def _backoff(self, retries: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.retry_after_cap))
        ceiling = min(self.retry_max_delay, self.retry_base_delay * (2 ** retries))
        return ceiling * (0.5 + 0.5 * self.rng.random())  # equal jitter: between half and all of it

    # ------------------------------------------------------------------ helpers

    def _system(self, request: ProposalRequest) -> str:
        return self.prompts.system(request.workload, role="author")

    def _seed(self, request: ProposalRequest) -> str:
        path = Path(request.workload.seed)
        if path not in self._seeds:
            try:
                self._seeds[path] = path.read_text()
            except OSError:
                return request.parents[0].source
        return self._seeds[path]

    def _proposal(self, request: ProposalRequest, edit: EditResult, rationale: str, tally: _Tally, *,
                  notes: list[str] | None = None, extra: dict[str, Any] | None = None) -> Proposal:
        all_notes = list(notes or []) + list(edit.notes)
        info: dict[str, Any] = {
            "model": self.model,
            "retries": tally.retries,
            "calls": tally.calls,
            "replies": tally.replies,
            "applied": edit.applied,
            "budget": self.ledger.summary(),
        }
        if all_notes:
            info["notes"] = all_notes
        if edit.error and edit.draft:
            info["draft"] = edit.draft
        info.update(extra or {})
        source = edit.source if edit.ok else ""
        return Proposal(
            kind=request.kind,
            parents=tuple(p.id for p in request.parents),
            source=source,
            design=dict(design_of(source) or {}) if source else {},
            rationale=rationale,
            agent=self.name,
            cost_usd=tally.usd,
            tokens_in=tally.tokens_in,
            tokens_out=tally.tokens_out,
            error="" if edit.ok else (edit.error or "no usable candidate came back"),
            extra=info,
        )

    def _failed(self, request: ProposalRequest, tally: _Tally, error: str) -> Proposal:
        self.last_error = error
        return self._proposal(request, EditResult(error=error), "", tally)


_SUMMARY_SYSTEM = ("You keep the notebook of a search over CUDA candidates for a multi-GPU kernel. From the recent "
                   "candidates and their results you write a short plain-text summary: what worked, what failed and "
                   "why, what has not been tried.")


def _file_name(request: ProposalRequest) -> str:
    return f"{request.workload.name}.cu"


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    """Seconds from the response's `retry-after-ms` or `retry-after` header (seconds or an HTTP date)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _status_text(exc: anthropic.APIStatusError) -> str:
    body = getattr(exc, "body", None)
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return f"HTTP {exc.status_code} {err.get('type', '')}: {err.get('message', '')}".strip()
    return f"HTTP {exc.status_code}: {exc}"
