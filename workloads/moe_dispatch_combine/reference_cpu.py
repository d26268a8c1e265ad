"""The CPU half of moe_dispatch_combine's reference (reference.py loads it and exports its names):
the shapes and buffers, the routing generator and the inputs, `expected` (the float64 answer the
tests check everything against), the index plans (`dispatch_order`, `Layout`) and `simulate`,
the reference's pipeline in NumPy (the same plans, the same bf16 roundings, the all-to-alls done
in memory), so the CPU tests check the GPU reference's index arithmetic without a GPU."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits

TOPK = 8
MAX_EXPERTS = 1024  # the route kernels keep one counter per expert in shared memory
_SEED_MOD = 1 << 32


# ---------------------------------------------------------------------------- shapes


def check_dims(dims: dict[str, int], world: int) -> None:
    E = dims["E"]
    if E % world:
        raise ValueError(f"E={E} experts do not split evenly over {world} ranks")
    if E < TOPK:
        raise ValueError(f"top-{TOPK} routing needs at least {TOPK} experts, not E={E}")
    if E > MAX_EXPERTS:
        raise ValueError(f"at most {MAX_EXPERTS} experts (the route kernels count them in shared memory), not E={E}")
    if not 0 < dims["HOT"] < 100:
        raise ValueError(f"HOT is a percentage below 100, not {dims['HOT']}")
    if dims["H"] % 8 or dims["I"] % 2:
        raise ValueError("H must be a multiple of 8 and I even")


def local_experts(dims: dict[str, int], world: int) -> int:
    return dims["E"] // world


def capacity(dims: dict[str, int], world: int) -> int:
    """The most rows one rank can receive from one source: a token's 8 experts are distinct,
    so it sends at most min(8, E/W) rows to any one rank."""
    return dims["T"] * min(TOPK, local_experts(dims, world))


def flops(dims: dict[str, int], world: int) -> int:
    """Floating-point operations of an average rank: T * 8 routed rows, each through [H, 2I] and
    [I, H] (the routing decides each rank's real share; the hot experts' ranks do more)."""
    return TOPK * dims["T"] * (2 * dims["H"] * 2 * dims["I"] + 2 * dims["I"] * dims["H"])


def comm_bytes(dims: dict[str, int], world: int) -> int:
    """Bytes an average rank receives: the (W-1)/W of its T * 8 routed rows that other ranks
    dispatch to it, and as many results coming back in the combine, [H] bf16 each."""
    return 2 * TOPK * dims["T"] * (world - 1) // world * dims["H"] * 2


def io_spec(dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    check_dims(dims, world)
    T, H, I = dims["T"], dims["H"], dims["I"]
    el = local_experts(dims, world)
    return {
        "inputs": [
            ("x", (T, H), "bf16"),
            ("topk_idx", (T, TOPK), "i32"),
            ("topk_w", (T, TOPK), "f32"),
            ("w13", (el, H, 2 * I), "bf16"),
            ("w2", (el, I, H), "bf16"),
        ],
        "outputs": [("out", (T, H), "bf16")],
    }


# ---------------------------------------------------------------------------- routing


def zipf_exponent(experts: int, hot: float) -> float:
    """The exponent s of popularity weights (rank + 1)^-s under which the hottest quarter of
    `experts` holds `hot` percent of the weight (0 when `hot` is at or below uniform)."""
    q = max(1, experts // 4)
    target = hot / 100.0
    if target <= q / experts:
        return 0.0
    if target >= 1.0:
        raise ValueError(f"HOT must be below 100, not {hot}")
    ranks = np.arange(1, experts + 1, dtype=np.float64)

    def share(s: float) -> float:
        w = ranks ** -s
        return float(w[:q].sum() / w.sum())

    lo, hi = 0.0, 1.0
    while share(hi) < target and hi < 256:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        if share(mid) < target:
            lo = mid
        else:
            hi = mid
    return hi


def popularity(experts: int) -> np.ndarray:
    """Each expert's place in the popularity order (0 = hottest). Fixed per E (not per run or
    rank), so every rank sees the same hot experts and bench runs see the same load."""
    return np.random.RandomState(0xE0E0 + experts).permutation(experts)


def routing(xp: Any, rs: Any, tokens: int, experts: int, hot: float) -> tuple[Any, Any]:
    """Top-8 distinct experts per token, drawn without replacement in proportion to the
    popularity weights (Gumbel top-k), and router weights: positive, summing to 1 per token."""
    s = zipf_exponent(experts, hot)
    logp = -s * np.log(popularity(experts).astype(np.float64) + 1.0)
    u = xp.clip(rs.random_sample((tokens, experts)), 1e-12, 1.0 - 1e-12)
    keys = xp.asarray(logp)[None, :] - xp.log(-xp.log(u))
    idx = xp.argsort(-keys, axis=1)[:, :TOPK].astype(xp.int32)
    scores = rs.uniform(0.05, 1.0, (tokens, TOPK))
    weights = (scores / scores.sum(axis=1, keepdims=True)).astype(xp.float32)
    return idx, weights


def token_inputs(xp: Any, dims: dict[str, int], rank: int, seed: int) -> tuple[Any, Any, Any, Any]:
    """The first draws of rank `rank`'s inputs: x (bf16 bits) and its routing (topk_idx, topk_w),
    with the generator that goes on to draw the expert weights. Alone, what a benchmark needs to
    know which rows a rank receives without generating a peer's weights."""
    rs = xp.random.RandomState((seed * 7919 + 1009 * rank + 1) % _SEED_MOD)
    x = to_bf16_bits(xp, rs.standard_normal((dims["T"], dims["H"])).astype(xp.float32))
    idx, weights = routing(xp, rs, dims["T"], dims["E"], dims["HOT"])
    return rs, x, idx, weights


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    """Fresh inputs: x standard normal; routing from the skewed generator; expert weights scaled
    by 1/sqrt(fan-in) so every intermediate is O(1). Generated expert by expert to bound the
    temporary memory (the weights of one rank reach 11 GB at the largest shape)."""
    H, I = dims["H"], dims["I"]
    rs, x, idx, weights = token_inputs(xp, dims, rank, seed)
    inputs["x"][...] = x
    inputs["topk_idx"][...] = idx
    inputs["topk_w"][...] = weights
    for e in range(local_experts(dims, world)):
        inputs["w13"][e] = to_bf16_bits(xp, (rs.standard_normal((H, 2 * I)) / math.sqrt(H)).astype(xp.float32))
        inputs["w2"][e] = to_bf16_bits(xp, (rs.standard_normal((I, H)) / math.sqrt(I)).astype(xp.float32))


# ---------------------------------------------------------------------------- the exact answer


def _silu(v: Any) -> Any:
    return v / (1.0 + np.exp(-v))


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """float64 on the CPU, no rounding of intermediates: for every rank's token t,
    out[t] = sum_k w[t,k] * ((silu(x_t W1_e) * (x_t W3_e)) W2_e) with e = topk_idx[t,k]."""
    I = dims["I"]
    el = local_experts(dims, world)
    w13 = [from_bf16_bits(np, all_inputs[e // el]["w13"][e % el]).astype(np.float64) for e in range(dims["E"])]
    w2 = [from_bf16_bits(np, all_inputs[e // el]["w2"][e % el]).astype(np.float64) for e in range(dims["E"])]
    outs = []
    for inp in all_inputs:
        x = from_bf16_bits(np, inp["x"]).astype(np.float64)
        idx = np.asarray(inp["topk_idx"])
        wts = np.asarray(inp["topk_w"]).astype(np.float64)
        out = np.zeros_like(x)
        for e in np.unique(idx):
            t, k = np.nonzero(idx == e)
            a = x[t] @ w13[e]
            y = (_silu(a[:, :I]) * a[:, I:]) @ w2[e]
            np.add.at(out, t, wts[t, k][:, None] * y)
        outs.append({"out": out})
    return outs


# ---------------------------------------------------------------------------- index plans (NumPy or CuPy)


def dispatch_order(xp: Any, topk_idx: Any, experts: int) -> tuple[Any, Any, Any]:
    """Sort the (token, choice) pairs by expert, stably (pair index breaks ties).
    Returns order (the pair at each send slot), pos (the send slot of each pair, int32) and the
    pairs per expert (int32 [E]). Send slots of rank p's experts form one segment, by expert."""
    flat = topk_idx.reshape(-1).astype(xp.int64)
    n = flat.size
    order = xp.argsort(flat * n + xp.arange(n, dtype=xp.int64))
    pos = xp.empty(n, dtype=xp.int32)
    pos[order] = xp.arange(n, dtype=xp.int32)
    counts = xp.bincount(flat, minlength=experts).astype(xp.int32)
    return order, pos, counts


def _exclusive(v: np.ndarray) -> np.ndarray:
    out = np.zeros(len(v) + 1, dtype=np.int64)
    np.cumsum(v, out=out[1:])
    return out


class Layout:
    """Host-side sizes of one iteration on one rank, from the pairs it sends per expert
    (`counts` [E]) and the rows it receives per (source rank, local expert) (`recv_counts` [W, E/W]).

    Send layout (rows sorted by global expert): segment p = rows for rank p, at send_off[p].
    Arrival layout (rows as received): segment p = rows from rank p (by local expert), at recv_off[p].
    Expert layout (rows the GEMMs read): segment e = rows of local expert e (by source), at expert_off[e]."""

    def __init__(self, counts: np.ndarray, recv_counts: np.ndarray) -> None:
        world, el = recv_counts.shape
        self.world, self.local = world, el
        self.counts = np.asarray(counts, dtype=np.int64)
        self.recv_counts = np.asarray(recv_counts, dtype=np.int64)
        self.send_n = self.counts.reshape(world, el).sum(axis=1)
        self.send_off = _exclusive(self.send_n)
        self.recv_n = self.recv_counts.sum(axis=1)
        self.recv_off = _exclusive(self.recv_n)
        self.expert_n = self.recv_counts.sum(axis=0)
        self.expert_off = _exclusive(self.expert_n)
        self.rows = int(self.recv_off[-1])

    def expert_to_arrival(self) -> np.ndarray:
        """For each row of the expert layout, its row in the arrival layout (int64 [rows])."""
        rc = self.recv_counts
        starts = (self.recv_off[:-1, None] + np.cumsum(rc, axis=1) - rc)  # [W, El]: arrival start of (p, e)
        lens = rc.T.reshape(-1)  # expert-major: (e, p)
        seg_starts = starts.T.reshape(-1)
        first = _exclusive(lens)[:-1]
        return np.repeat(seg_starts - first, lens) + np.arange(int(lens.sum()), dtype=np.int64)

    def received_bytes(self, rank: int, hidden: int) -> int:
        """Bytes that cross the links into this rank: dispatched rows plus returned results."""
        others = [p for p in range(self.world) if p != rank]
        rows = int(self.recv_n[others].sum() + self.send_n[others].sum())
        return rows * hidden * 2


# ---------------------------------------------------------------------------- the pipeline in NumPy


def _round_bf16(v: np.ndarray) -> np.ndarray:
    return from_bf16_bits(np, to_bf16_bits(np, v.astype(np.float32)))


def simulate(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """The reference's pipeline on the CPU: the same plans (`dispatch_order`, `Layout`), the
    all-to-alls as copies between the ranks' arrays, bf16 rounding wherever the GPU stores bf16
    (GEMM results, silu * up, expert outputs, the output). float32 elsewhere."""
    E, I = dims["E"], dims["I"]
    el = local_experts(dims, world)
    plans = [dispatch_order(np, np.asarray(inp["topk_idx"]), E) for inp in all_inputs]
    sends = [np.asarray(inp["x"])[order // TOPK] for inp, (order, _, _) in zip(all_inputs, plans)]
    layouts = [Layout(plans[r][2], np.stack([plans[p][2][r * el:(r + 1) * el] for p in range(world)]))
               for r in range(world)]
    results = []  # per rank: its results in arrival layout, bf16 bits
    for r in range(world):
        lay = layouts[r]
        arrival = np.concatenate([sends[p][layouts[p].send_off[r]:layouts[p].send_off[r + 1]] for p in range(world)])
        e2a = lay.expert_to_arrival()
        xe = from_bf16_bits(np, arrival[e2a])
        y = np.empty((lay.rows, dims["H"]), dtype=np.float32)
        for e in range(el):
            lo, hi = lay.expert_off[e], lay.expert_off[e + 1]
            if hi == lo:
                continue
            w13 = from_bf16_bits(np, all_inputs[r]["w13"][e])
            w2 = from_bf16_bits(np, all_inputs[r]["w2"][e])
            a = _round_bf16(xe[lo:hi] @ w13)
            h = _round_bf16(_silu(a[:, :I]) * a[:, I:])
            y[lo:hi] = _round_bf16(h @ w2)
        back = np.empty_like(y)
        back[e2a] = y
        results.append(back)
    outs = []
    for r in range(world):
        order, pos, _ = plans[r]
        comb = np.concatenate([results[p][layouts[p].recv_off[r]:layouts[p].recv_off[r + 1]] for p in range(world)])
        wts = np.asarray(all_inputs[r]["topk_w"], dtype=np.float32)
        rows = comb[pos].reshape(-1, TOPK, dims["H"])
        acc = np.zeros(rows.shape[::2], dtype=np.float32)
        for k in range(TOPK):  # the GPU kernel's order: choice 0 first, fp32
            acc += wts[:, k:k + 1] * rows[:, k]
        outs.append({"out": _round_bf16(acc).astype(np.float64)})
    return outs
