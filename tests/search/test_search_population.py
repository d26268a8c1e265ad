"""Population logic of the search: selection, schedule, migration, novelty, archive."""

import random
from collections import Counter

import pytest

from cuco_tui.core.ranking import rank_key
from cuco_tui.search.archive import Archive
from cuco_tui.search.config import ConfigError, SearchConfig
from cuco_tui.search.novelty import NoveltyFilter, normalize
from cuco_tui.search.population import EXPLOIT, EXPLORE, KIND_WEIGHTS, Population, choose_kind, phase_of, rank_weights
from cuco_tui.core.records import CandidateRecord

DESIGN_LSA = {"backend": "nccl_lsa", "placement": "before", "sync": "global", "issuer": "multi_cta", "chunk": "full",
              "streams": "1", "comm_sms": "64", "knobs": {}}
DESIGN_HOST = {"backend": "nccl_host", "placement": "before", "sync": "global", "issuer": "host", "chunk": "full",
               "streams": "1", "comm_sms": "0", "knobs": {}}


def rec(cid, *, gen=1, island=0, status="measured", speedup=None, kind="full", design=None, source=None, extra=None,
        rejected_by=""):
    return CandidateRecord(id=cid, generation=gen, island=island, kind=kind, parents=(),
                           source=f"// {cid}\n" if source is None else source,
                           design=DESIGN_HOST if design is None else design, rationale="", agent="test", status=status, speedup=speedup,
                           rejected_by=rejected_by, extra=extra or {})


def test_rank_weights_follow_a_power_law():
    w = rank_weights(4, 2.0)
    assert w == [1.0, 0.25, 1 / 9, 1 / 16]
    assert rank_weights(3, 0.0) == [1.0, 1.0, 1.0]


def test_ranking_puts_measured_by_speedup_then_unmeasured_then_failures():
    recs = [rec("c0001", status="incorrect"), rec("c0002", speedup=1.1), rec("c0003", status="no_gpu"),
            rec("c0004", speedup=1.6), rec("c0005", status="compile_error")]
    order = [r.id for r in sorted(recs, key=rank_key)]
    assert order[:3] == ["c0004", "c0002", "c0003"]
    assert set(order[3:]) == {"c0001", "c0005"}


def test_selection_favors_better_ranks():
    cfg = SearchConfig(islands=1, selection_exponent=1.5)
    pop = Population(cfg)
    for i, s in enumerate([1.0, 1.2, 1.4, 1.6, 1.8]):
        pop.add(rec(f"c{i:04d}", speedup=s, source=f"// {i}\nint x{i};\n"))
    rng = random.Random(0)
    counts = Counter(pop.sample(pop.ranked(0), rng).id for _ in range(4000))
    ranked_ids = ["c0004", "c0003", "c0002", "c0001", "c0000"]
    freqs = [counts[i] for i in ranked_ids]
    assert freqs == sorted(freqs, reverse=True), freqs
    w = rank_weights(5, 1.5)
    assert abs(freqs[0] / 4000 - w[0] / sum(w)) < 0.03


def test_failures_rank_last_in_explore_and_leave_exploit():
    pop = Population(SearchConfig(islands=1))
    pop.add(rec("c0001", speedup=1.2))
    pop.add(rec("c0002", status="deadlock"))
    explore = [r.id for r in pop.ranked(0, include_failures=True)]
    assert explore == ["c0001", "c0002"]
    assert [r.id for r in pop.ranked(0, include_failures=False)] == ["c0001"]
    rng = random.Random(1)
    picked = Counter(pop.select(0, EXPLORE, rng, kind="diff").parents[0].id for _ in range(600))
    assert picked["c0002"] > 0 and picked["c0001"] > picked["c0002"]
    picked = Counter(pop.select(0, EXPLOIT, rng, kind="diff").parents[0].id for _ in range(200))
    assert picked == Counter({"c0001": 200})


def test_only_failures_still_give_a_parent_in_exploit():
    pop = Population(SearchConfig(islands=1))
    pop.add(rec("c0001", status="compile_error"))
    assert pop.select(0, EXPLOIT, random.Random(0), kind="diff").parents[0].id == "c0001"


def test_turned_away_candidates_are_never_parents():
    pop = Population(SearchConfig(islands=1))
    pop.add(rec("c0001", status="no_gpu"))
    pop.add(rec("c0002", status="rejected", rejected_by="review"))
    pop.add(rec("c0003", status="rejected", source=""))
    assert [r.id for r in pop.ranked(0)] == ["c0001"]


def test_schedule_switches_at_explore_share():
    cfg = SearchConfig(generations=10, explore_share=0.3)
    assert [phase_of(g, cfg) for g in range(1, 11)] == [EXPLORE] * 3 + [EXPLOIT] * 7
    assert all(phase_of(g, SearchConfig(generations=4, explore_share=0.0)) == EXPLOIT for g in range(1, 5))
    assert all(phase_of(g, SearchConfig(generations=4, explore_share=1.0)) == EXPLORE for g in range(1, 5))


def test_mutation_kind_follows_the_phase():
    rng = random.Random(5)
    explore = Counter(choose_kind(EXPLORE, rng) for _ in range(3000))
    exploit = Counter(choose_kind(EXPLOIT, rng) for _ in range(3000))
    assert explore["full"] + explore["crossover"] > 2 * explore["diff"]
    assert exploit["diff"] > 2 * (exploit["full"] + exploit["crossover"])
    assert "crossover" not in Counter(choose_kind(EXPLORE, rng, can_crossover=False) for _ in range(200))
    assert set(KIND_WEIGHTS) == {EXPLORE, EXPLOIT}


def test_crossover_draws_two_distinct_parents():
    pop = Population(SearchConfig(islands=1))
    pop.add(rec("c0001", speedup=1.2, source="int a;"))
    pop.add(rec("c0002", speedup=1.1, source="int b;", design=DESIGN_LSA))
    sel = pop.select(0, EXPLORE, random.Random(0), kind="crossover")
    assert sel.kind == "crossover" and len({p.id for p in sel.parents}) == 2


def test_crossover_needs_two_candidates():
    pop = Population(SearchConfig(islands=1))
    pop.add(rec("c0001", speedup=1.2))
    sel = pop.select(0, EXPLORE, random.Random(0), kind="crossover")
    assert sel.kind == "full" and len(sel.parents) == 1


def test_seed_is_shared_by_every_island():
    pop = Population(SearchConfig(islands=3))
    pop.add(rec("c0000", gen=0, kind="seed", status="no_gpu"))
    assert all(pop.ranked(i)[0].id == "c0000" for i in range(3))


def test_migration_copies_each_islands_best_to_the_next():
    pop = Population(SearchConfig(islands=3))
    pop.add(rec("c0001", island=0, speedup=1.5, source="a"))
    pop.add(rec("c0002", island=0, speedup=1.1, source="b"))
    pop.add(rec("c0003", island=1, speedup=1.3, source="c"))
    moves = pop.migrate()
    assert sorted(moves) == [(0, 1, "c0001"), (1, 2, "c0003")]
    assert "c0001" in pop.islands[1].pool() and "c0001" not in pop.islands[2].pool()
    # a migrant is a parent option on its new island
    assert pop.ranked(1)[0].id == "c0001"
    assert pop.migrate() == [(1, 2, "c0003")] or "c0003" in pop.islands[2].pool()


def test_rebuild_replays_migrations():
    cfg = SearchConfig(islands=2, migration_interval=2)
    records = [rec("c0001", gen=1, island=0, speedup=1.4, source="a"), rec("c0002", gen=2, island=1, speedup=1.1,
                                                                            source="b"),
               rec("c0003", gen=3, island=0, speedup=1.0, source="c")]
    pop = Population.rebuild(records, cfg)
    assert "c0001" in pop.islands[1].migrants and "c0002" in pop.islands[0].migrants
    assert pop.best.id == "c0001"


SRC = """// frozen
// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host
__global__ void k(float* y, int n) {
  int i = blockIdx.x * 256 + threadIdx.x;  // one per thread
  if (i < n) { y[i] = 2.0f * y[i]; }
}
// EVOLVE-BLOCK-END
"""


def test_normalize_ignores_comments_and_layout():
    a = normalize("int  x = 1; // one\n\n/* block\ncomment */ int y;\n")
    b = normalize("int x = 1;\n   int y;")
    assert a == b


def test_novelty_rejects_exact_duplicates_modulo_comments_and_whitespace():
    f = NoveltyFilter()
    f.add("c0001", SRC, DESIGN_HOST)
    same = SRC.replace("// one per thread", "").replace("  int i", "\tint   i") + "\n\n"
    v = f.check(same, DESIGN_LSA)
    assert not v.novel and v.duplicate_of == "c0001" and "same code" in v.reason


def test_novelty_rejects_near_duplicates_of_the_same_design():
    f = NoveltyFilter(threshold=0.95)
    f.add("c0001", SRC, DESIGN_HOST)
    renamed = SRC.replace("y[i] = 2.0f * y[i]", "y[i] = y[i] * 2.0f")
    v = f.check(renamed, DESIGN_HOST)
    assert not v.novel and v.duplicate_of == "c0001" and v.similarity >= 0.95
    # another design, or another constant, is not a near-duplicate
    assert f.check(renamed, DESIGN_LSA).novel
    assert f.check(SRC.replace("256", "128"), DESIGN_HOST).novel
    # a real change is novel
    assert f.check(SRC.replace("y[i] = 2.0f * y[i];", "y[i] = y[i] + y[n - 1 - i]; y[i] *= 0.5f;"), DESIGN_HOST).novel


def test_archive_keeps_the_best_per_cell():
    a = Archive()
    assert a.offer(rec("c0001", speedup=1.1, design=DESIGN_HOST))
    assert not a.offer(rec("c0002", speedup=1.0, design=DESIGN_HOST))
    assert a.offer(rec("c0003", speedup=1.3, design=DESIGN_HOST))
    assert a.offer(rec("c0004", status="no_gpu", design=DESIGN_LSA))
    assert not a.offer(rec("c0005", status="deadlock", design=DESIGN_LSA))  # failures never enter
    assert a.offer(rec("c0006", speedup=0.9, design=DESIGN_LSA))  # measured beats unmeasured
    cells = {cell: r.id for cell, r in a.cells().items()}
    assert cells == {("nccl_host", "before", "global", "host"): "c0003",
                     ("nccl_lsa", "before", "global", "multi_cta"): "c0006"}
    # tuning knobs do not make a new cell
    assert not a.offer(rec("c0007", speedup=0.5, design={**DESIGN_LSA, "chunk": "4", "knobs": {"x": 1}}))


def test_archive_reads_the_design_line_when_the_record_has_none():
    a = Archive()
    src = "// EVOLVE-BLOCK-START\n// cuco-design: backend=cuda_ipc placement=interleaved sync=per_peer issuer=cta\n" \
          "// EVOLVE-BLOCK-END\n"
    a.offer(rec("c0001", status="no_gpu", design={}, source=src))
    assert list(a.cells()) == [("cuda_ipc", "interleaved", "per_peer", "cta")]


def test_config_rejects_what_cannot_work():
    with pytest.raises(ConfigError, match="review mode"):
        SearchConfig(review_mode="sometimes")
    with pytest.raises(ConfigError, match="explore_share"):
        SearchConfig(explore_share=1.5)
    assert SearchConfig(islands=4).proposals == 4
    assert SearchConfig(islands=4, proposals_per_generation=2).proposals == 2


def test_a_verified_candidate_is_a_parent_with_no_fitness():
    """Verified with its ranks sharing one GPU (nothing timed): drawn as a parent in exploit too,
    ranked after every measured candidate and before the compiled-only, never the best, and no
    failure to show the next prompt."""
    from cuco_tui.search.feedback import render_failure

    pop = Population(SearchConfig(islands=1))
    result = {"candidate": "c0002.cu", "workload": "gemm_allgather", "status": "verified", "level": 2,
              "reason": "verified (every rank on one GPU: nothing timed)"}
    verified = CandidateRecord(**{**rec("c0002", status="verified").__dict__, "result": result})
    assert not pop.add(rec("c0001", status="no_gpu"))
    assert not pop.add(verified)
    assert pop.best is None and pop.last_failure(0) is None and render_failure(verified) == ""
    assert [r.id for r in pop.ranked(0, include_failures=False)] == ["c0002", "c0001"]
    assert pop.select(0, EXPLOIT, random.Random(0), kind="diff").parents[0].id in ("c0001", "c0002")
    assert pop.add(rec("c0003", speedup=0.4))  # the slowest measured one is the best there is
    assert [r.id for r in pop.ranked(0)] == ["c0003", "c0002", "c0001"] and pop.best.id == "c0003"
    assert len(pop.archive) == 1 and pop.archive.elites()[0].id == "c0003"  # one cell: the measured one holds it


def test_an_exhausted_agents_placeholder_is_neither_parent_nor_failure():
    pop = Population(SearchConfig(islands=1))
    reason = "no candidate: the offline agent has proposed every valid combination of its strategy templates"
    old = CandidateRecord.from_dict({**rec("c0002", status="rejected", source="").to_dict(),
                                     "result": {"status": "rejected", "level": 0, "reason": reason},
                                     "extra": {"rejected_by": "agent"}})
    assert old.placeholder and old.status == "exhausted"
    pop.add(rec("c0001", speedup=1.1))
    pop.add(old)
    assert [r.id for r in pop.ranked(0)] == ["c0001"] and pop.last_failure(0) is None
