/* cuco_perturb.h: the schedule perturbations of L2 verification, as one policy in plain C.
 *
 * A correct candidate gives the right answer whatever the timing of its streams and of the other
 * ranks; a racy one gives it only when the timing is kind. The harness therefore runs a
 * candidate's back-to-back launches again with its ordering points (copies, event records and
 * waits, kernel launches, NCCL calls, GEMMs) held back on their streams, in patterns that open
 * the windows of the usual races wide:
 *   copies_late   rank T's copies each wait 2 units: a signal that does not wait for its copy
 *                 (or a peer that reads before the copy it needs has landed) reads stale data;
 *   rank_late     rank T starts 2 units late and each of its ordering points waits 1 unit: its
 *                 peers run a launch ahead, and one that reuses a buffer T still reads shows;
 *   compute_late  rank T's kernel launches and GEMMs each wait 2 units: whatever moves or
 *                 announces a result before the kernel that produces it shows;
 *   scatter       every rank's ordering points wait, each with probability 1/2, up to 2 units,
 *                 and rank T starts up to 3 units late.
 * Everything follows from one integer seed (the kind is seed % 4, T is (seed / 4) % world), and
 * each rank draws its holds in the order its host enqueues them, so a seed replays a schedule.
 * Holds add at most CUCO_PERTURB_BUDGET_UNITS units per rank between two configure calls.
 *
 * Used by the interposer (cuco_perturb.cpp, in the rank worker) and by the CPU emulator
 * (workloads/cp_attention/emulator/emu_runtime.h): both hold the same ordering points back by
 * the same amounts for a seed. C and C++, header only.
 */
#ifndef CUCO_PERTURB_H_
#define CUCO_PERTURB_H_

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CUCO_PERTURB_VERSION 1
#define CUCO_PERTURB_BUDGET_UNITS 32

/* The ordering points a candidate enqueues, by what they do. */
enum cuco_op_class {
  CUCO_OP_COPY = 0,   /* cudaMemcpy*Async, cudaMemsetAsync */
  CUCO_OP_EVENT = 1,  /* cudaEventRecord, cudaStreamWaitEvent */
  CUCO_OP_KERNEL = 2, /* kernel launches, graph launches */
  CUCO_OP_NCCL = 3,   /* NCCL collectives, sends and receives */
  CUCO_OP_GEMM = 4,   /* cuBLAS / cuBLASLt GEMMs */
  CUCO_OP_CLASSES = 5
};

enum cuco_perturb_kind {
  CUCO_PERTURB_COPIES_LATE = 0,
  CUCO_PERTURB_RANK_LATE = 1,
  CUCO_PERTURB_COMPUTE_LATE = 2,
  CUCO_PERTURB_SCATTER = 3,
  CUCO_PERTURB_KINDS = 4
};

typedef struct cuco_perturb_policy {
  uint64_t seed;
  int32_t rank;
  int32_t world;
  int32_t kind;            /* enum cuco_perturb_kind */
  int32_t target;          /* the rank T the perturbation aims at */
  uint32_t unit_us;
  uint32_t start_delay_us; /* how late this rank starts each launch (held before its inputs are set) */
  uint64_t budget_us;      /* holds left before the next configure */
  uint64_t calls;          /* ordering points drawn for */
  uint64_t delayed;        /* ... of which held back */
  uint64_t delayed_us;     /* their holds, summed */
  uint64_t per_class[CUCO_OP_CLASSES];
} cuco_perturb_policy;

/* splitmix64's finalizer: a counter-based draw, the same in C, C++ and on every platform. */
static inline uint64_t cuco_perturb_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline const char* cuco_perturb_kind_name(int kind) {
  switch (kind) {
    case CUCO_PERTURB_COPIES_LATE: return "copies_late";
    case CUCO_PERTURB_RANK_LATE: return "rank_late";
    case CUCO_PERTURB_COMPUTE_LATE: return "compute_late";
    case CUCO_PERTURB_SCATTER: return "scatter";
    default: return "unknown";
  }
}

/* How late the target starts under `scatter`: the same on every rank, from the seed alone. */
static inline uint32_t cuco_perturb_scatter_start_us(uint64_t seed, uint32_t unit_us) {
  return (uint32_t)(cuco_perturb_mix(seed ^ 0x5CA77E25ull) % (3ull * unit_us + 1));
}

static inline void cuco_perturb_init(cuco_perturb_policy* p, uint64_t seed, int rank, int world, uint32_t unit_us) {
  memset(p, 0, sizeof *p);
  p->seed = seed;
  p->rank = rank;
  p->world = world > 0 ? world : 1;
  p->kind = (int32_t)(seed % CUCO_PERTURB_KINDS);
  p->target = (int32_t)((seed / CUCO_PERTURB_KINDS) % (uint64_t)p->world);
  p->unit_us = unit_us;
  p->budget_us = (uint64_t)CUCO_PERTURB_BUDGET_UNITS * unit_us;
  if (rank == p->target) {
    if (p->kind == CUCO_PERTURB_RANK_LATE) p->start_delay_us = 2 * unit_us;
    if (p->kind == CUCO_PERTURB_SCATTER) p->start_delay_us = cuco_perturb_scatter_start_us(seed, unit_us);
  }
}

/* The hold before this rank's next ordering point of class `op`, in microseconds (0: none). */
static inline uint32_t cuco_perturb_draw(cuco_perturb_policy* p, int op) {
  const uint64_t call = p->calls++;
  if (op >= 0 && op < CUCO_OP_CLASSES) p->per_class[op]++;
  const int mine = p->rank == p->target;
  uint64_t us = 0;
  switch (p->kind) {
    case CUCO_PERTURB_COPIES_LATE:
      if (mine && op == CUCO_OP_COPY) us = 2ull * p->unit_us;
      break;
    case CUCO_PERTURB_RANK_LATE:
      if (mine) us = p->unit_us;
      break;
    case CUCO_PERTURB_COMPUTE_LATE:
      if (mine && (op == CUCO_OP_KERNEL || op == CUCO_OP_GEMM)) us = 2ull * p->unit_us;
      break;
    case CUCO_PERTURB_SCATTER: {
      const uint64_t r = cuco_perturb_mix(p->seed ^ cuco_perturb_mix(((uint64_t)p->rank << 40) ^ call));
      if (r & 1) us = (r >> 1) % (2ull * p->unit_us + 1);
      break;
    }
    default:
      break;
  }
  if (us > p->budget_us) us = p->budget_us;
  p->budget_us -= us;
  if (us) {
    p->delayed++;
    p->delayed_us += us;
  }
  return (uint32_t)us;
}

/* One sentence, the same on every rank: what the seed does. Returns what snprintf returns. */
static inline int cuco_perturb_describe(const cuco_perturb_policy* p, char* buf, size_t len) {
  const double unit_ms = p->unit_us / 1000.0;
  switch (p->kind) {
    case CUCO_PERTURB_COPIES_LATE:
      return snprintf(buf, len, "rank %d's copies each held back %.1f ms", p->target, 2 * unit_ms);
    case CUCO_PERTURB_RANK_LATE:
      return snprintf(buf, len, "rank %d started %.1f ms late and each of its ordering points held back %.1f ms",
                      p->target, 2 * unit_ms, unit_ms);
    case CUCO_PERTURB_COMPUTE_LATE:
      return snprintf(buf, len, "rank %d's kernel launches and GEMMs each held back %.1f ms", p->target, 2 * unit_ms);
    case CUCO_PERTURB_SCATTER:
      return snprintf(buf, len, "every rank's ordering points held back at random, up to %.1f ms each; rank %d "
                      "started %.1f ms late", 2 * unit_ms, p->target,
                      cuco_perturb_scatter_start_us(p->seed, p->unit_us) / 1000.0);
    default:
      return snprintf(buf, len, "no perturbation");
  }
}

#endif /* CUCO_PERTURB_H_ */
