"""The Claude agent against a local stand-in of the Messages API (127.0.0.1, random port): the
real `anthropic` SDK, scripted replies built from the workload's real candidates."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from fake_messages_server import FakeMessagesServer

from cuco_tui.agents.base import BudgetExhausted, ProposalRequest
from cuco_tui.agents.claude import ClaudeAgent
from cuco_tui.agents.claude.accounting import DEFAULT_PRICE, PRICES, Ledger, Price, price_for
from cuco_tui.agents.claude.edits import apply_diffs, apply_full, explanation_of
from cuco_tui.agents.claude.prompts import PROMPTS_DIR, Prompts, evolve_blocks, parse_judge
from cuco_tui.evaluate.l0 import check_l0
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.source.regions import design_of
from cuco_tui.core.records import CandidateRecord
from cuco_tui.workload.manifest import load_workload

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

WORKLOAD = load_workload("gemm_allgather")
SEED = WORKLOAD.seed.read_text()
LSA = (WORKLOAD.root / "candidates" / "lsa_allgather.cu").read_text()


def _record(cid: str, source: str, kind: str = "full", status: str = "measured", speedup: float | None = 1.0,
            **kw) -> CandidateRecord:
    return CandidateRecord(id=cid, generation=0, island=0, kind=kind, parents=(), source=source,
                           design=design_of(source) or {}, rationale=kw.pop("rationale", f"{cid} rationale"),
                           agent="engineer", status=status, speedup=speedup, **kw)


SEED_REC = _record("c0000", SEED, kind="seed")
LSA_REC = _record("c0003", LSA, speedup=1.08)

# ---------------------------------------------------------------------------- scripted replies

GEMM_LINE = "                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));"
DIFF_REPLY = f"""Ask cuBLAS for tensor-op algorithms and declare the unchanged design.

<<<<<<< SEARCH
// cuco-design: backend=nccl_host placement=before sync=global issuer=host chunk=full streams=1 comm_sms=0
=======
// cuco-design: backend=nccl_host placement=before sync=global issuer=host chunk=full streams=1 comm_sms=0
// GEMM: tensor-op algorithm hint.
>>>>>>> REPLACE

<<<<<<< SEARCH
{GEMM_LINE}
=======
{GEMM_LINE.replace("CUBLAS_GEMM_DEFAULT", "CUBLAS_GEMM_DEFAULT_TENSOR_OP")}
>>>>>>> REPLACE
"""

OUTSIDE_REPLY = f"""Two edits.

<<<<<<< SEARCH
{GEMM_LINE}
=======
{GEMM_LINE.replace("CUBLAS_GEMM_DEFAULT", "CUBLAS_GEMM_DEFAULT_TENSOR_OP")}
>>>>>>> REPLACE

<<<<<<< SEARCH
  return candidate_launch(static_cast<Candidate*>(state), stream);
=======
  return state ? candidate_launch(static_cast<Candidate*>(state), stream) : 1;
>>>>>>> REPLACE
"""

LSA_BLOCKS = evolve_blocks(LSA)
FULL_REPLY = ("Move the gather onto the GPU: every block stores its slice into every peer's symmetric window "
              "between two LSA barriers, then one cuBLAS GEMM.\n\n```cuda\n" + LSA_BLOCKS + "\n```\n")
CROSS_BLOCKS = LSA_BLOCKS.replace("constexpr int kCopyBlocks = 64;", "constexpr int kCopyBlocks = 32;").replace(
    "comm_sms=all", "comm_sms=32")
CROSS_REPLY = ("From c0003 the LSA gather; from c0000 the single cuBLAS call on the harness stream; fewer copy "
               "blocks (32) leave more SMs to the GEMM.\n\n```cuda\n" + CROSS_BLOCKS + "\n```\n")
# A first fast-path attempt without the entry barrier: a peer may still read the window.
NO_ENTRY = LSA_BLOCKS.replace(
    "  cuco::lsa_barrier_sync(trace, CUCO_SITE, bar, block, blockIdx.x, cuda::memory_order_acquire);\n", "")
FAST_REPLY_1 = "Device-initiated gather with LSA stores.\n\n```cuda\n" + NO_ENTRY + "\n```\n"
FAST_REPLY_2 = "Added the entry barrier the reviewer asked for.\n\n```cuda\n" + LSA_BLOCKS + "\n```\n"
JUDGE_REJECT = """VERDICT: REJECT
DEVICE_INITIATED: YES
CORRECT: NO
REASONS:
- no entry barrier before the LSA stores: a peer's previous GEMM may still read the window; add lsa_barrier_sync with acquire first
"""
JUDGE_ACCEPT = """VERDICT: ACCEPT
DEVICE_INITIATED: YES
CORRECT: YES
REASONS:
- LSA stores between an entry and an exit barrier; the GEMM reads the local window after the exit barrier
"""


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-dummy")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with FakeMessagesServer() as s:
        yield s


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def make_agent(server, sleeps):
    def make(**kw) -> ClaudeAgent:
        kw.setdefault("budget_usd", 10.0)
        kw.setdefault("retry_base_delay", 0.001)
        kw.setdefault("timeout", 10.0)
        kw.setdefault("screen", check_l0)  # as agents/factory.py wires it
        return ClaudeAgent(base_url=server.url, sleep=sleeps.append, rng=random.Random(0), **kw)
    return make


def _request(kind: str, parents=(SEED_REC,), **kw) -> ProposalRequest:
    return ProposalRequest(kind=kind, workload=WORKLOAD, parents=tuple(parents), **kw)


# ---------------------------------------------------------------------------- the required cases


def test_valid_diff_applies_and_passes_static_checks(server, make_agent):
    server.reply(DIFF_REPLY, input_tokens=4000, output_tokens=300)
    agent = make_agent()
    p = agent.propose(_request("diff"))
    assert p.error == ""
    assert "CUBLAS_GEMM_DEFAULT_TENSOR_OP" in p.source and "// GEMM: tensor-op algorithm hint." in p.source
    assert not is_rejected(check_static(p.source, SEED, "c.cu"))
    assert p.design["backend"] == "nccl_host"
    assert p.rationale.startswith("Ask cuBLAS for tensor-op algorithms")
    assert "<<<<<<<" not in p.rationale
    assert p.agent == "claude:claude-sonnet-4-6" and p.kind == "diff" and p.parents == ("c0000",)
    assert (p.tokens_in, p.tokens_out) == (4000, 300)
    assert p.extra["applied"] == 2 and p.extra["retries"] == 0
    # What went over the wire: the real SDK's request to /v1/messages.
    (req,) = server.requests
    assert req.path == "/v1/messages"
    assert req.body["model"] == "claude-sonnet-4-6"
    assert req.body["max_tokens"] == agent.max_tokens
    assert GEMM_LINE in req.prompt  # the parent's code
    assert "<<<<<<< SEARCH" in req.prompt  # the expected format
    assert "EVOLVE-BLOCK-START" in req.system and "Task: AllGather + GEMM" in req.system


def test_valid_full_rewrite(server, make_agent):
    server.reply(FULL_REPLY)
    p = make_agent().propose(_request("full"))
    assert p.error == ""
    assert p.source == LSA  # the blocks went into the seed's frozen skeleton
    assert p.design["backend"] == "nccl_lsa" and p.design["issuer"] == "cta"
    assert p.rationale.startswith("Move the gather onto the GPU")
    assert "```" not in p.rationale
    assert "```cuda" in server.requests[0].prompt


def test_crossover_of_two_parents(server, make_agent):
    server.reply(CROSS_REPLY)
    p = make_agent().propose(_request("crossover", parents=(LSA_REC, SEED_REC)))
    assert p.error == "", p.error
    assert p.kind == "crossover" and p.parents == ("c0003", "c0000")
    assert "constexpr int kCopyBlocks = 32;" in p.source
    assert p.design["comm_sms"] == "32"
    assert not is_rejected(check_static(p.source, SEED, "c.cu"))
    prompt = server.requests[0].prompt
    assert "ncclAllGather(cuco::input(ctx, \"x\")->ptr" in prompt  # the seed's code
    assert "lsa_allgather<<<kCopyBlocks, kCopyThreads, 0, stream>>>" in prompt  # the LSA parent's code
    assert "`c0003`" in prompt and "`c0000`" in prompt


def test_edit_outside_evolve_blocks_is_refused_naming_the_line(server, make_agent):
    server.reply(OUTSIDE_REPLY)
    p = make_agent().propose(_request("diff"))
    assert p.source == ""
    assert "edit 2 changes line 68, outside the EVOLVE blocks; only code between the markers may change" in p.error
    assert p.design == {}


def test_reply_without_code(server, make_agent):
    server.reply("I would move the all-gather onto the GPU with LSA stores and overlap it with the GEMM.")
    p = make_agent().propose(_request("full"))
    assert p.source == ""
    assert "holds no code" in p.error
    server.reply("Nothing to change, the parent is fine.")
    p = make_agent().propose(_request("diff"))
    assert p.source == "" and "no code and no SEARCH/REPLACE edits" in p.error


def test_truncated_reply(server, make_agent):
    cut = FULL_REPLY[: len(FULL_REPLY) // 2]
    server.reply(cut, stop_reason="max_tokens", output_tokens=16000)
    p = make_agent().propose(_request("full"))
    assert p.source == ""
    assert "cut off" in p.error and "max_tokens" in p.error
    assert p.tokens_out == 16000 and p.cost_usd > 0  # a cut-off reply is still paid for
    # Unterminated without max_tokens: a fence never closed, a SEARCH never finished.
    server.reply(cut)
    p = make_agent().propose(_request("full"))
    assert p.source == "" and "ends inside a code block" in p.error and "cut off" in p.error
    server.reply(DIFF_REPLY[: DIFF_REPLY.index(">>>>>>> REPLACE")])
    p = make_agent().propose(_request("diff"))
    assert p.source == "" and "ends inside edit 1" in p.error and "cut off" in p.error


def test_overloaded_then_success_counts_one_retry(server, make_agent, sleeps):
    server.error(529, "overloaded_error", "Overloaded")
    server.reply(DIFF_REPLY)
    p = make_agent().propose(_request("diff"))
    assert p.error == ""
    assert "CUBLAS_GEMM_DEFAULT_TENSOR_OP" in p.source
    assert p.extra["retries"] == 1 and p.extra["calls"][0]["retries"] == 1
    assert len(server.requests) == 2
    assert len(sleeps) == 1 and 0.0005 <= sleeps[0] <= 0.001  # base delay with jitter, no real sleep


def test_budget_cap_stops_before_any_request(server, make_agent):
    server.reply(DIFF_REPLY, input_tokens=1000, output_tokens=500)  # $0.0105 at sonnet prices
    server.reply(DIFF_REPLY)  # must never be asked for
    agent = make_agent(budget_usd=0.001)
    p = agent.propose(_request("diff"))
    assert p.error == "" and p.cost_usd == pytest.approx(0.0105)
    assert agent.ledger.spent_usd >= 0.001
    with pytest.raises(BudgetExhausted, match="budget is spent"):
        agent.propose(_request("diff"))
    assert len(server.requests) == 1
    with pytest.raises(BudgetExhausted):
        agent.summarize([SEED_REC])
    assert len(server.requests) == 1


def test_fast_path_judge_rejects_once_then_accepts(server, make_agent):
    server.reply(FAST_REPLY_1, input_tokens=5000, output_tokens=2000)
    server.reply(JUDGE_REJECT, input_tokens=3000, output_tokens=100)
    server.reply(FAST_REPLY_2, input_tokens=6000, output_tokens=2000)
    server.reply(JUDGE_ACCEPT, input_tokens=3000, output_tokens=100)
    p = make_agent().propose(_request("fast_path"))
    assert p.error == ""
    assert p.source == LSA
    assert p.design["backend"] == "nccl_lsa"
    assert p.extra["judge"] == "accepted" and p.extra["attempts"] == 2
    assert [c["purpose"] for c in p.extra["calls"]] == ["fast_path", "judge", "fast_path", "judge"]
    assert len(server.requests) == 4
    assert (p.tokens_in, p.tokens_out) == (17000, 4200)
    assert p.cost_usd == pytest.approx((17000 * 3 + 4200 * 15) / 1e6)
    rewrite1, judge1, rewrite2, judge2 = server.requests
    assert "device-initiated" in rewrite1.prompt and "ncclAllGather" in rewrite1.prompt
    assert "VERDICT: ACCEPT or REJECT" in judge1.prompt and "lsa_allgather" in judge1.prompt
    assert "no entry barrier before the LSA stores" in rewrite2.prompt  # the objection fed back
    assert "was not accepted" in rewrite2.prompt
    assert "review CUDA candidates" in judge1.system
    assert "Added the entry barrier" in p.rationale


def test_prompt_carries_feedback_hints_meta_summary_and_design_context(server, make_agent):
    server.reply(DIFF_REPLY)
    feedback = ("seed.cu:43:24: error: identifier \"cublasGemmExx\" is undefined\n"
                "    CUCO_TRY_CUBLAS(ctx, cublasGemmExx(c->blas, ...));")
    request = _request("diff", inspirations=(LSA_REC,), feedback=feedback,
                       meta_summary="LSA gathers reach 1.08x; chunked host gathers deadlocked twice.",
                       hints=("keep cuBLAS for the GEMM", "try 32 copy blocks"),
                       design_context="H200 x2, NVLink 18 links; GIN not available.", phase="exploit")
    make_agent().propose(request)
    prompt = server.requests[0].prompt
    assert "cublasGemmExx" in prompt and "What went wrong last time" in prompt
    assert "LSA gathers reach 1.08x" in prompt
    assert "- keep cuBLAS for the GEMM\n- try 32 copy blocks" in prompt
    assert "GIN not available" in prompt
    assert "exploit" in prompt
    assert "`c0003`" in prompt and "speedup 1.080x" in prompt  # the inspiration
    assert "backend=nccl_host" in prompt  # the parent's design coordinates
    assert "No host synchronization in launch" in server.requests[0].system


def test_feedback_comes_from_the_failed_parent_when_the_request_has_none(server, make_agent):
    result = {"reason": "rank 1 did not finish launch 1 within 20 s",
              "diagnostics": [{"level": 2, "severity": "error", "message": "launch timed out", "file": "c.cu",
                               "line": 26, "column": 3, "source_line": "  cuco::lsa_barrier_sync(trace, ...);",
                               "rank": 1}],
              "deadlock_report": "rank 1, block 0: waits at line 26 for barrier 0 (all peers)",
              "verifications": []}
    parent = _record("c0007", LSA, status="deadlock", speedup=None, result=result)
    server.reply(DIFF_REPLY.replace("nccl_host", "nccl_lsa"))
    make_agent().propose(_request("diff", parents=(parent,)))
    prompt = server.requests[0].prompt
    assert "deadlock report" in prompt and "waits at line 26" in prompt
    assert "[rank 1] c.cu:26:3: error: launch timed out" in prompt


def test_dollars_from_usage_and_price_table(server, make_agent):
    server.reply(FULL_REPLY, model="claude-opus-4-1", input_tokens=2000, output_tokens=1000,
                 cache_read_input_tokens=10000, cache_creation_input_tokens=400)
    agent = make_agent(model="claude-opus-4-1")
    p = agent.propose(_request("full"))
    expected = (2000 * 15 + 1000 * 75 + 400 * 15 * 1.25 + 10000 * 15 * 0.1) / 1e6
    assert p.cost_usd == pytest.approx(expected)
    assert p.tokens_in == 12400 and p.tokens_out == 1000
    assert agent.ledger.spent_usd == pytest.approx(expected)
    assert agent.ledger.calls[0].purpose == "full" and agent.ledger.calls[0].priced
    assert p.agent == "claude:claude-opus-4-1"


# ---------------------------------------------------------------------------- more of the agent


def test_rate_limit_honours_retry_after(server, make_agent, sleeps):
    server.error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit",
                 headers={"retry-after": "2"})
    server.reply(FULL_REPLY)
    p = make_agent().propose(_request("full"))
    assert p.error == "" and p.extra["retries"] == 1
    assert sleeps == [2.0]


def test_connection_error_is_retried(server, make_agent, sleeps):
    server.drop()
    server.reply(FULL_REPLY)
    p = make_agent().propose(_request("full"))
    assert p.error == "" and p.extra["retries"] == 1 and len(sleeps) == 1


def test_retries_exhausted_give_an_error_not_an_exception(server, make_agent, sleeps):
    for _ in range(3):
        server.error(529)
    server.reply(FULL_REPLY)  # one too late
    p = make_agent(max_retries=2).propose(_request("full"))
    assert p.source == "" and "failed after 2 retries" in p.error and "overloaded_error" in p.error
    assert p.extra["retries"] == 2 and len(server.requests) == 3
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0] / 2  # exponential, with jitter
    assert p.cost_usd == 0.0


def test_non_retryable_error_is_reported(server, make_agent, sleeps):
    server.error(400, "invalid_request_error", "max_tokens: too large")
    p = make_agent().propose(_request("full"))
    assert p.source == "" and "refused" in p.error and "max_tokens: too large" in p.error
    assert sleeps == [] and len(server.requests) == 1


def test_fast_path_never_accepted_returns_last_attempt_with_objections(server, make_agent):
    server.reply(FAST_REPLY_1)
    server.reply(JUDGE_REJECT)
    server.reply(FAST_REPLY_1)
    server.reply(JUDGE_REJECT.replace("no entry barrier", "still no entry barrier"))
    p = make_agent(fast_path_iterations=2).propose(_request("fast_path"))
    assert len(server.requests) == 4
    assert p.error == "" and "memory_order_acquire" not in p.source  # the last attempt, as written
    assert p.extra["judge"] == "not accepted"
    assert "did not accept" in p.rationale and "still no entry barrier" in p.rationale


def test_fast_path_unusable_attempt_is_fed_back_without_a_judge_call(server, make_agent):
    server.reply("I will make it device-initiated.")  # no code: no judge call for it
    server.reply(FAST_REPLY_2)
    server.reply(JUDGE_ACCEPT)
    p = make_agent().propose(_request("fast_path"))
    assert p.error == "" and p.source == LSA
    assert [c["purpose"] for c in p.extra["calls"]] == ["fast_path", "fast_path", "judge"]
    assert "holds no code" in server.requests[1].prompt


def test_diff_reply_with_a_full_rewrite_is_applied_as_one(server, make_agent):
    server.reply(FULL_REPLY)
    p = make_agent().propose(_request("diff"))
    assert p.error == "" and p.source == LSA
    assert any("full rewrite" in n for n in p.extra["notes"])


def test_summarize(server, make_agent):
    failed = _record("c0004", NO_ENTRY.join([SEED[:SEED.index("// EVOLVE-BLOCK-START")],
                                             SEED[SEED.index("// EVOLVE-BLOCK-END") + len("// EVOLVE-BLOCK-END"):]]),
                     status="deadlock", speedup=None,
                     result={"reason": "rank 0 hung", "diagnostics": [
                         {"level": 2, "severity": "error", "message": "launch timed out", "file": "c.cu", "line": 30}]})
    server.reply("LSA gather measured 1.08x; removing the entry barrier deadlocks.", output_tokens=40)
    agent = make_agent()
    agent.workload = WORKLOAD
    text = agent.summarize([SEED_REC, LSA_REC, failed])
    assert text.startswith("LSA gather measured 1.08x")
    prompt = server.requests[0].prompt
    for needle in ("c0000", "c0003", "c0004", "deadlock", "1.080x", "backend=nccl_lsa", "launch timed out"):
        assert needle in prompt
    assert "notebook" in server.requests[0].system
    assert agent.last_summary == text


def test_agent_protocol_surface():
    agent = ClaudeAgent(client=object(), budget_usd=1.0)
    assert agent.name == "claude:claude-sonnet-4-6"
    assert callable(agent.propose) and callable(agent.summarize)
    p = agent.propose(_request("diff", parents=()))
    assert p.source == "" and "needs a parent" in p.error


# ---------------------------------------------------------------------------- edits, without a server


def test_diff_search_must_match_exactly_once():
    reply = "<<<<<<< SEARCH\n  cuco_ctx* ctx = c->ctx;\n=======\n  cuco_ctx* ctx = c->ctx;  // x\n>>>>>>> REPLACE\n"
    r = apply_diffs(SEED, reply, screen=check_l0)
    assert not r.ok and "matches the parent 2 times (at lines 35, 51)" in r.error


def test_diff_no_match_says_where_it_diverges():
    reply = ("<<<<<<< SEARCH\n  const int W = ctx->world;\n  const size_t shard = (size_t)(c->M / W) * c->Q;\n"
             "=======\n  x\n>>>>>>> REPLACE\n")
    r = apply_diffs(SEED, reply, screen=check_l0)
    assert "does not match" in r.error and "parent line 37" in r.error


def test_diff_trailing_whitespace_fallback():
    reply = ("<<<<<<< SEARCH\n  c->ctx = ctx;   \n  c->M = cuco::dim(ctx, \"M\");\n=======\n  c->ctx = ctx;\n"
             "  c->M = cuco::dim(ctx, \"M\");  // rows\n>>>>>>> REPLACE\n")
    r = apply_diffs(SEED, reply, seed=SEED, screen=check_l0)
    assert r.ok and "// rows" in r.source
    assert any("trailing whitespace" in n for n in r.notes)


def test_diff_marker_lines_as_unchanged_context_are_fine_but_insertions_outside_are_not():
    ok = apply_diffs(SEED, "<<<<<<< SEARCH\n// EVOLVE-BLOCK-END\n=======\n// new last line\n// EVOLVE-BLOCK-END\n"
                           ">>>>>>> REPLACE\n", screen=check_l0)
    assert ok.ok and "// new last line\n// EVOLVE-BLOCK-END" in ok.source
    bad = apply_diffs(SEED, "<<<<<<< SEARCH\n// EVOLVE-BLOCK-END\n=======\n// EVOLVE-BLOCK-END\n// after\n"
                            ">>>>>>> REPLACE\n", screen=check_l0)
    assert "inserts code after line 58, outside the EVOLVE blocks" in bad.error


def test_static_checks_have_the_final_word():
    reply = "<<<<<<< SEARCH\n  c->ctx = ctx;\n=======\n  c->ctx = ctx;\n  system(\"nvidia-smi\");\n>>>>>>> REPLACE\n"
    r = apply_diffs(SEED, reply, seed=SEED, screen=check_l0)
    assert not r.ok and r.source == "" and "static checks" in r.error and "`system`" in r.error
    assert "system(" in r.draft


def test_the_factory_wires_the_l0_screen_into_the_claude_agent(server, monkeypatch):
    from cuco_tui.agents.factory import make_agent as build_agent

    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.reply("<<<<<<< SEARCH\n  c->ctx = ctx;\n=======\n  c->ctx = ctx;\n  system(\"nvidia-smi\");\n"
                 ">>>>>>> REPLACE\n")
    agent = build_agent("claude", WORKLOAD, budget_usd=1.0)
    assert agent.screen is check_l0
    p = agent.propose(_request("diff"))
    assert p.source == "" and "static checks" in p.error and "`system`" in p.error
    assert "system(" in p.extra["draft"]


def test_without_a_screen_the_edit_is_left_to_the_cascade():
    reply = "<<<<<<< SEARCH\n  c->ctx = ctx;\n=======\n  c->ctx = ctx;\n  system(\"nvidia-smi\");\n>>>>>>> REPLACE\n"
    r = apply_diffs(SEED, reply, seed=SEED)
    assert r.ok and "system(" in r.source
    assert is_rejected(check_static(r.source, SEED, "c.cu"))


def test_full_rewrite_whole_file_and_block_count():
    whole = apply_full(SEED, "```cpp\n" + LSA.replace("CUCO_EXPORT int cuco_teardown", "CUCO_EXPORT int  cuco_teardown")
                       + "```\n", screen=check_l0)
    assert whole.ok and whole.source == LSA  # frozen text of the reply ignored, with a note
    assert any("outside the EVOLVE blocks differs" in n for n in whole.notes)
    two = apply_full(SEED, "```cuda\n" + LSA_BLOCKS + "\n" + LSA_BLOCKS + "\n```\n", screen=check_l0)
    assert not two.ok and "has 2 EVOLVE blocks but the parent has 1" in two.error
    nomark = apply_full(SEED, "```cuda\nint x;\n```\n", screen=check_l0)
    assert "no EVOLVE-BLOCK markers" in nomark.error


def test_explanation_drops_code():
    assert explanation_of(DIFF_REPLY) == "Ask cuBLAS for tensor-op algorithms and declare the unchanged design."
    assert explanation_of(FULL_REPLY).startswith("Move the gather") and "EVOLVE" not in explanation_of(FULL_REPLY)


# ---------------------------------------------------------------------------- accounting, prompts, judge


def test_price_table():
    assert price_for("claude-sonnet-4-5")[0] == Price(3.0, 15.0)
    assert price_for("claude-sonnet-4-5-20250929")[0] == Price(3.0, 15.0)
    assert price_for("claude-opus-4-5-20251101")[0] == Price(5.0, 25.0)
    assert price_for("claude-opus-4-1")[0] == Price(15.0, 75.0)
    assert price_for("claude-haiku-4-5")[0] == Price(1.0, 5.0)
    assert price_for("anthropic.claude-opus-4-1-20250805-v1:0")[0] == Price(15.0, 75.0)
    price, known = price_for("claude-unknown-9")
    assert price == DEFAULT_PRICE and not known
    assert DEFAULT_PRICE.input >= max(p.input for p in PRICES.values())
    assert DEFAULT_PRICE.output >= max(p.output for p in PRICES.values())


def test_ledger_cap():
    ledger = Ledger(model="claude-haiku-4-5", cap_usd=0.01)
    ledger.ensure_budget()
    c = ledger.charge({"input_tokens": 5000, "output_tokens": 1000}, purpose="diff")
    assert c.usd == pytest.approx(0.01) and c.tokens_in == 5000
    with pytest.raises(BudgetExhausted):
        ledger.ensure_budget()
    assert ledger.summary()["calls"] == 1


def test_parse_judge():
    assert parse_judge(JUDGE_ACCEPT).accept
    v = parse_judge(JUDGE_REJECT)
    assert not v.accept and v.device_initiated is True and v.correct == "no"
    assert v.objections[0].startswith("no entry barrier")
    assert not parse_judge("VERDICT: ACCEPT\nDEVICE_INITIATED: NO\nCORRECT: YES\nREASONS:\n- host NCCL left").accept
    odd = parse_judge("Looks fine to me.")
    assert not odd.accept and "not in the expected format" in odd.objections[0]
    assert parse_judge("**VERDICT:** ACCEPT\n**DEVICE_INITIATED:** YES\n**CORRECT:** UNSURE\n").accept


def test_templates_exist_and_render():
    for name in ("system.md.j2", "fast_path.md.j2", "judge.md.j2", "diff.md.j2", "full.md.j2", "crossover.md.j2",
                 "meta_summary.md.j2"):
        assert (PROMPTS_DIR / name).is_file(), name
    prompts = Prompts()
    for role in ("author", "judge", "summarizer"):
        assert "gemm_allgather" in prompts.system(WORKLOAD, role=role)
    text = prompts.proposal(_request("crossover", parents=(SEED_REC,)))  # one parent: a full rewrite
    assert "Rewrite the EVOLVE block" in text
    fp = prompts.fast_path(replace(_request("fast_path")), attempt=2, previous_source=LSA,
                           objections=["add the exit barrier"])
    assert "add the exit barrier" in fp and "lsa_allgather" in fp


def test_set_budget_lifts_and_lowers_the_cap(server, make_agent):
    server.reply(FULL_REPLY, input_tokens=1000, output_tokens=500)
    server.reply(FULL_REPLY, input_tokens=1000, output_tokens=500)
    agent = make_agent(budget_usd=0.001)
    agent.propose(_request("full"))
    with pytest.raises(BudgetExhausted):
        agent.propose(_request("full"))
    agent.set_budget(1.0)
    assert agent.propose(_request("full")).error == ""
    assert agent.spent_usd == pytest.approx(0.021) and agent.budget_usd == 1.0
    agent.set_budget(0.0)
    with pytest.raises(BudgetExhausted):
        agent.propose(_request("full"))
    assert len(server.requests) == 2


def test_a_judges_accept_of_a_still_host_driven_rewrite_is_overruled_by_the_classifier(server, make_agent):
    from cuco_tui.agents.factory import host_driven_reason

    still_host = ("Kept NCCL but on a second stream.\n\n```cuda\n" + evolve_blocks(SEED).replace(
        "comm_sms=0", "comm_sms=0\n// (claims to be device-initiated)") + "\n```\n")
    server.reply(still_host)
    server.reply(JUDGE_ACCEPT)  # the judge is fooled
    server.reply(FAST_REPLY_2)
    server.reply(JUDGE_ACCEPT)
    p = make_agent(host_driven=host_driven_reason).propose(_request("fast_path"))
    assert p.error == "" and p.source == LSA
    assert p.extra["judge"] == "accepted" and p.extra["attempts"] == 2
    first = p.extra["rounds"][0]
    assert first["accepted"] is False and "nccl_host" in first["classifier"]
    assert "still host-driven" in server.requests[2].prompt  # the classifier's objection fed back


def test_a_host_driven_rewrite_is_never_the_accepted_fast_path(server, make_agent):
    from cuco_tui.agents.factory import host_driven_reason

    still_host = "Same thing.\n\n```cuda\n" + evolve_blocks(SEED) + "\n```\n"
    for _ in range(2):
        server.reply(still_host)
        server.reply(JUDGE_ACCEPT)
    p = make_agent(host_driven=host_driven_reason, fast_path_iterations=2).propose(_request("fast_path"))
    assert p.extra["judge"] == "not accepted"
    assert "still host-driven" in p.rationale
