"""GPU placement of evaluations: disjoint groups, NVLink adjacency, one run per GPU."""

import itertools
import threading
import time
from collections import Counter

import pytest

from cuco_tui.executors import Executor, GpuGroup, GpuPool, PlacementError, local_pool, plan_groups


def full_mesh(n, links=18):
    return {i: {j: links for j in range(n) if j != i} for i in range(n)}


def pairs_topology(pairs, n, links=4):
    """Only the given pairs are NVLink-connected."""
    topo = {i: {} for i in range(n)}
    for a, b in pairs:
        topo[a][b] = links
        topo[b][a] = links
    return topo


def gpus_of(groups):
    return [g.gpus for g in groups]


def test_two_gpus_one_group():
    assert gpus_of(plan_groups([0, 1], 2)) == [(0, 1)]
    assert gpus_of(plan_groups([0, 1], 2, full_mesh(2))) == [(0, 1)]


def test_four_gpus_two_rank_workload_gets_two_groups():
    groups = plan_groups([0, 1, 2, 3], 2)
    assert gpus_of(groups) == [(0, 1), (2, 3)]
    assert [g.index for g in groups] == [0, 1]


def test_eight_gpus_two_rank_workload_gets_four_groups():
    assert gpus_of(plan_groups(list(range(8)), 2, full_mesh(8))) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert gpus_of(plan_groups(list(range(8)), 4)) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_adjacent_pairs_are_preferred():
    # NVLink bridges join 0-2 and 1-3 (not 0-1): the groups follow the links.
    topo = pairs_topology([(0, 2), (1, 3)], 4)
    assert gpus_of(plan_groups([0, 1, 2, 3], 2, topo)) == [(0, 2), (1, 3)]


def test_adjacency_on_eight_gpus():
    topo = pairs_topology([(0, 7), (1, 6), (2, 5), (3, 4)], 8)
    assert gpus_of(plan_groups(list(range(8)), 2, topo)) == [(0, 7), (1, 6), (2, 5), (3, 4)]


def test_four_rank_groups_follow_islands_of_links():
    # two NVLink islands {0,2,4,6} and {1,3,5,7}, fully connected inside
    topo = {i: {j: 6 for j in range(8) if j != i and j % 2 == i % 2} for i in range(8)}
    assert gpus_of(plan_groups(list(range(8)), 4, topo)) == [(0, 2, 4, 6), (1, 3, 5, 7)]


def test_more_links_win_among_connected_pairs():
    topo = full_mesh(4, links=2)
    topo[0][3] = topo[3][0] = 12
    topo[1][2] = topo[2][1] = 12
    assert gpus_of(plan_groups([0, 1, 2, 3], 2, topo)) == [(0, 3), (1, 2)]


def test_odd_gpu_left_idle_and_the_linked_ones_kept():
    topo = pairs_topology([(1, 2)], 3)
    assert gpus_of(plan_groups([0, 1, 2], 2, topo)) == [(1, 2)]
    assert gpus_of(plan_groups([0, 1, 2], 2)) == [(0, 1)]


def test_a_subset_of_gpus():
    assert gpus_of(plan_groups([4, 5, 6, 7], 2, full_mesh(8))) == [(4, 5), (6, 7)]


def test_large_machines_use_a_greedy_cut():
    topo = pairs_topology([(i, 15 - i) for i in range(8)], 16)
    groups = gpus_of(plan_groups(list(range(16)), 2, topo))
    assert sorted(groups) == sorted((i, 15 - i) for i in range(8))


def test_too_few_gpus():
    with pytest.raises(PlacementError, match="needs 4 GPUs"):
        plan_groups([0, 1], 4)


def test_groups_are_disjoint_for_every_size():
    for n, world in itertools.product((2, 4, 8), (1, 2, 4, 8)):
        if world > n:
            continue
        groups = plan_groups(list(range(n)), world, full_mesh(n))
        flat = [g for grp in groups for g in grp.gpus]
        assert len(flat) == len(set(flat)) == n and len(groups) == n // world


def test_overlapping_groups_are_refused():
    with pytest.raises(PlacementError, match="overlap"):
        GpuPool([GpuGroup(0, (0, 1)), GpuGroup(1, (1, 2))])


@pytest.mark.parametrize("n", [2, 4, 8])
def test_never_two_runs_on_one_gpu_under_concurrency(n):
    pool = GpuPool(plan_groups(list(range(n)), 2, full_mesh(n)))
    on_gpu = Counter()
    worst = Counter()
    lock = threading.Lock()
    runs = []

    def job(k):
        with pool.lease() as group:
            with lock:
                for g in group.gpus:
                    on_gpu[g] += 1
                    worst[g] = max(worst[g], on_gpu[g])
                runs.append(group.index)
            time.sleep(0.002 * (k % 3))
            with lock:
                for g in group.gpus:
                    on_gpu[g] -= 1

    threads = [threading.Thread(target=job, args=(k,)) for k in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 60
    assert max(worst.values()) == 1
    assert set(runs) == set(range(n // 2))  # every group was used
    assert pool.busy() == 0


def test_acquire_times_out_when_all_groups_are_lent():
    pool = GpuPool(plan_groups([0, 1], 2))
    g = pool.acquire()
    assert pool.acquire(timeout=0.05) is None
    pool.release(g)
    assert pool.acquire(timeout=0.05) == g
    with pytest.raises(ValueError):
        pool.release(GpuGroup(7, (7,)))


def test_cpu_only_pool():
    pool = GpuPool.cpu_only(3)
    assert pool.size == 3 and all(g.gpus == () for g in pool.groups)


def test_the_local_pool_is_an_executor_and_without_gpus_lends_cpu_slots(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    pool = local_pool(2, (), cpu_slots=3)
    assert isinstance(pool, Executor)
    assert [g.gpus for g in pool.groups] == [(), (), ()] and pool.size == 3
    with pool.lease() as a, pool.lease() as b:
        assert a != b and pool.busy() == 2
    assert pool.busy() == 0

