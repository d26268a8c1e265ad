"""The device call's reading of its results (benchmarks/gemm_rs.py): per shape the reference, its
parts and bound, each candidate's time, speedup and time over the bound, the best over the bound,
and PyTorch async-TP beside them; and the script that runs it all in one call."""

import importlib.util
import subprocess

from repo_paths import REPO

BENCH = REPO / "benchmarks" / "gemm_rs.py"
SCRIPT = REPO / "benchmarks" / "runs" / "gemm_rs.sh"


def _bench():
    spec = importlib.util.spec_from_file_location("gemm_rs_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spread(ms):
    return {"median": ms, "min": ms, "max": ms, "p25": ms * 0.99, "p75": ms * 1.01, "n": 30}


def _shape(name, dims, ref, gemm, rs, link):
    return {"shape": name, "dims": dict(zip("MKN", dims)), "reference": _spread(ref),
            "parts": {"gemm": _spread(gemm), "reducescatter": _spread(rs)}, "peer_gbps": 370.0,
            "overlap_bound_ms": max(gemm, rs), "link_bound_ms": link}


def _result(status, timings):
    return {"status": status, "reason": "why" if status != "measured" else "", "timings": [
        {"shape": s, "candidate": _spread(ms), "speedup": sp} for s, ms, sp in timings]}


def test_the_table_reads_times_speedups_and_the_bound():
    base = {"shapes": [_shape("mlp-down-8b", (8192, 14336, 4096), 0.80, 0.66, 0.20, 0.66),
                       _shape("long-seq", (32768, 1024, 4096), 0.80, 0.20, 0.60, 0.40)]}
    results = {"seed": _result("measured", [("mlp-down-8b", 0.80, 1.0), ("long-seq", 0.80, 1.0)]),
               "ce_push": _result("measured", [("mlp-down-8b", 0.70, 1.14), ("long-seq", 0.50, 1.6)]),
               "host_chunked": _result("deadlock", [])}
    yard = [{"M": 32768, "K": 1024, "N": 4096, "sequential": [0.82, 0.8, 0.9], "asynctp": [0.64, 0.6, 0.7]}]
    table = _bench().report(base, results, yard)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "shape" not in line]
    long_seq = next(r for r in rows if r.startswith("| long-seq"))
    cells = [c.strip() for c in long_seq.strip("|").split("|")]
    assert cells[1:6] == ["0.800", "0.200", "0.600", "370", "0.400"]  # the bound is bytes / peer, not max(parts)
    assert cells[6] == "0.800 1.00x 2.00" and cells[7] == "0.500 1.60x 1.25" and cells[8] == "deadlock"
    assert cells[9] == "1.25"  # the best candidate over the bound
    assert cells[10:] == ["0.820", "0.640", "1.25x", "1.60"]  # async-TP against our reference and the bound
    mlp = [c.strip() for c in next(r for r in rows if r.startswith("| mlp-down-8b")).strip("|").split("|")]
    assert mlp[9] == "1.06" and mlp[10:] == ["-", "-", "-", "-"]  # no async-TP figure for this shape
    assert "host_chunked: deadlock: why" in table


def test_the_bound_falls_back_to_the_parts_without_a_peer_copy():
    base = {"shapes": [_shape("short-seq", (2048, 14336, 4096), 0.3, 0.2, 0.1, None)]}
    table = _bench().report(base, {"seed": _result("measured", [("short-seq", 0.3, 1.0)])}, [])
    row = next(line for line in table.splitlines() if line.startswith("| short-seq"))
    assert "| 0.200 |" in row and "0.300 1.00x 1.50" in row and "async-TP" not in table


def test_the_device_script_parses_and_names_what_it_runs():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    for needed in ("prebuild.py", "baseline -w gemm_reducescatter", "yardstick_gemm_rs.py", "benchmarks/gemm_rs.py",
                   "search --workload gemm_reducescatter", "export_bundle", "pip install"):
        assert needed in text, needed
    assert (REPO / "benchmarks" / "yardstick_gemm_rs.py").is_file()
    assert "fused_matmul_reduce_scatter" in (REPO / "benchmarks" / "yardstick_gemm_rs.py").read_text()


def test_the_candidates_are_the_seed_each_strategy_and_the_chosen_points(tmp_path):
    """What the device call times when given no files: ce_fold at its defaults and at 8 chunks,
    ce_push at its defaults and where the searches ended, each rendered once."""
    from cuco_tui.workload.manifest import load_workload

    w = load_workload("gemm_reducescatter")
    cands = _bench().default_candidates(w, tmp_path / "rendered")
    assert [p.stem for p in cands] == ["seed", "host_chunked", "ce_push", "ce_fold", "ce_push-2-256-one",
                                       "ce_fold-8-one"]
    assert cands[0] == w.seed and len({p.read_text() for p in cands}) == len(cands)
    assert "constexpr int kChunks = 8;" in cands[-1].read_text()
