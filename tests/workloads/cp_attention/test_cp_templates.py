"""cp_attention's seed and strategy templates through L0 and L1: the seed's static checks and
declared design, every knob setting of every strategy rendered through L0 and classified as it
declares, the fast path, and the templates compiled."""

import itertools

from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import evaluate
from cuco_tui.core.result import Status
from cp_common import SEED, VARIANTS, W, _book, can_compile
from static_helpers import assert_static_ok


# ---------------------------------------------------------------------------- seed and templates (L0, L1)


def _static_ok(src):
    assert_static_ok(src, SEED)


def test_seed_passes_the_static_checks_and_declares_what_it_does():
    from cuco_tui.design.classify import classify

    _static_ok(SEED)
    assert classify(SEED).inferred() == {"backend": "nccl_host", "placement": "before", "sync": "global",
                                         "issuer": "host", "chunk": "full", "streams": "1", "comm_sms": "0"}


@can_compile
def test_seed_compiles_and_stops_with_no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    r = evaluate(W.seed, W)
    assert r.status == Status.NO_GPU, r.reason


def test_every_strategy_renders_every_knob_setting_through_l0():
    from cuco_tui.design.classify import classify

    book = _book()
    assert {s.name for s in book.strategies} == {"host_sequential", "host_attn", "host_flash", "ring", "attn_overlap",
                                                 "attn_balance", "balance_overlap", "ipc_pull"}
    assert book.render(book.get("host_attn"), {}) == SEED
    rendered = set()
    for s in book.strategies:
        for values in itertools.product(*s.knobs.values()):
            knobs = s.normalized(dict(zip(s.knobs, values)))
            src = book.render(s, knobs)
            if src in rendered:
                continue
            _static_ok(src)
            inferred = classify(src).inferred()
            assert inferred == s.point(knobs).coords(), (s.name, knobs)
            rendered.add(src)
    assert len(rendered) > 20


def test_fast_path_is_the_ipc_pull():
    from cuco_tui.agents.base import ProposalRequest
    from cuco_tui.agents.offline import OfflineAgent
    from cuco_tui.core.records import CandidateRecord

    seed = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=SEED, design={},
                           rationale="seed", agent="workload", status="measured", speedup=1.0)
    p = OfflineAgent(W).propose(ProposalRequest(kind="fast_path", workload=W, parents=(seed,)))
    assert p.error == "" and p.design["backend"] == "cuda_ipc" and p.design["knobs"]["strategy"] == "ipc_pull"


@can_compile
def test_strategy_templates_compile(tmp_path):
    from cuco_tui.toolchain import BuildCache, compile_candidate

    book = _book()
    variants = [(s.name, s.default_knobs()) for s in book.strategies if s.name != "host_sequential"]  # = the seed
    cache = BuildCache()  # the session's (conftest): built once a run
    sources = {}
    for name, knobs in variants + VARIANTS:
        s = book.get(name)
        sources.setdefault(book.render(s, s.normalized(knobs)), name + "".join(f"-{v}" for v in knobs.values()))
    for src, label in sources.items():
        path = tmp_path / f"{label}.cu"
        path.write_text(src)
        r = compile_candidate(path, discover(), cache)
        assert r.ok, f"{path.name}:\n" + "\n".join(d.render() for d in r.diagnostics)
