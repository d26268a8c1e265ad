"""A 3-generation Claude search of tp_attn_out (the workload added through the scaffold), with the
real `anthropic` SDK against a local Messages-API server: candidates are committed and compiled,
no other workload's facts reach its prompts, a fast-path reply the classifier calls host-driven is
never the accepted fast path, and the summary's cost is the sum of every call the server answered."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from cuco_tui.agents.claude.prompts import evolve_blocks
from cuco_tui.lineage import SessionRepo
from cuco_tui.source.knobs import with_knobs
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import load_workload
from fake_messages_server import FakeMessagesServer, Recorded, message
from repo_paths import REPO

pytest.importorskip("anthropic")
if not discover().can_compile:
    pytest.skip("no CUDA toolchain here: the cascade cannot compile", allow_module_level=True)

W = load_workload("tp_attn_out")
SEED = W.seed.read_text()
IN, OUT = 1200, 400  # tokens of every fake reply
PER_CALL = (IN * 3.0 + OUT * 15.0) / 1e6  # claude-sonnet-4-x: $3 / $15 per million tokens


class Author:
    """Answers like a model would, by the kind of request: judge, notebook, or a rewrite whose
    knobs differ from every earlier one (so each is new code)."""

    def __init__(self) -> None:
        self.settings = itertools.product((2, 4, 8, 1), (0, 8, 16, 32), (256, 128, 512, 1024))
        next(self.settings)  # (2, 0, 256) first: the seed's own setting is (1, 0, 256)

    def __call__(self, req: Recorded):
        if "review CUDA candidates" in req.system:
            return message("VERDICT: ACCEPT\nDEVICE_INITIATED: yes\nCORRECT: yes\nREASONS:\n- looks right",
                           input_tokens=IN, output_tokens=OUT)
        if "notebook" in req.system:
            return message("Token blocks on two streams compile; nothing measured yet (no GPU).",
                           input_tokens=IN, output_tokens=OUT)
        chunks, ctas, threads = next(self.settings)
        source = with_knobs(SEED, {"kChunks": chunks, "kNcclMaxCtas": ctas, "kNormThreads": threads})
        text = (f"Try {chunks} token blocks, NCCL capped at {ctas or 'its default'} CTAs, a {threads}-thread norm."
                f"\n\n```cuda\n{evolve_blocks(source)}\n```\n")
        return message(text, input_tokens=IN, output_tokens=OUT)


def test_a_claude_search_of_the_scaffolded_workload(tmp_path):
    with FakeMessagesServer(responder=Author()) as server:
        env = dict(os.environ, CUCO_NO_GPU="1", ANTHROPIC_API_KEY="sk-ant-test-dummy", ANTHROPIC_BASE_URL=server.url)
        out = subprocess.run([sys.executable, "-c", "import sys; from cuco_tui.cli import main; sys.exit(main())",
                              "search", "--workload", "tp_attn_out", "--agent", "claude", "--generations", "3",
                              "--islands", "2", "--session", str(tmp_path / "s"), "--json"],
                             env=env, capture_output=True, text=True, timeout=1200, cwd=REPO)
        requests = list(server.requests)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    with SessionRepo.open(tmp_path / "s") as repo:
        records = repo.records(with_source=True)
    compiled = [r for r in records if r.agent.startswith("claude") and r.status == "no_gpu"]
    assert len(compiled) >= 4, [(r.id, r.kind, r.status, (r.result or {}).get("reason", "")[:80]) for r in records]
    # every answered call is in the summary's cost, meta-summaries included
    answered = [r for r in requests if r.path.startswith("/v1/messages")]
    assert any("notebook" in r.system for r in answered)  # a meta-summary was asked for and paid
    assert summary["spent_usd"] == pytest.approx(len(answered) * PER_CALL, rel=1e-6)
    # the fast path: every reply was still host-driven, so the judge's ACCEPT never made one the result
    fast = [r for r in records if r.kind == "fast_path"]
    assert fast and all(r.extra.get("judge") != "accepted" for r in fast), [r.extra for r in fast]
    assert any("still host-driven" in r.prompt for r in answered)
    # nothing of another workload in what the model was told
    for other in ("gemm_allgather", "kv_transfer", "moe_dispatch_combine", "cp_attention"):
        assert not any(other in r.prompt or other in r.system for r in answered), other
    leaked = ("the gathered data", "NCCL all-gather, then one cuBLAS GEMM", "Chunking NCCL itself loses")
    assert not any(phrase in r.prompt for phrase in leaked for r in answered)
