// emu_perturb.h: schedule perturbations in the CPU model of the CUDA runtime (emu_runtime.h, which
// includes this after its streams), as L2 verification applies them on GPUs: the policy is
// cuco_tui/harness/perturb_lib/cuco_perturb.h, shared with the rank worker's interposer. While a
// rank's perturbation is enabled (a driver enables it around cuco_launch), each of its copies,
// event records and waits, kernel launches, NCCL calls and GEMMs is preceded on its stream by the
// hold the policy draws for it, in the order the rank's host thread enqueues them. With settling
// on (emu_progress.h), a hold of the kinds that make one rank late (copies_late, rank_late,
// compute_late) lasts its time and then until the rest of the run has settled: the peers have run
// as far ahead as they can, however slowly this machine runs their kernels. scatter's holds, at
// random on every rank, keep their time alone.
#pragma once

// A path from this file, so that no include flag is needed.
#include "../../../cuco_tui/harness/perturb_lib/cuco_perturb.h"

inline std::mutex emu_perturb_mu;
inline cuco_perturb_policy emu_perturb[64];
inline bool emu_perturb_on[64] = {};

// A new perturbation for `rank` (its holds drawn from `seed`), disabled until emu_perturb_enable.
inline void emu_perturb_configure(int rank, uint64_t seed, int world, uint32_t unit_us) {
  std::lock_guard<std::mutex> lock(emu_perturb_mu);
  cuco_perturb_init(&emu_perturb[rank], seed, rank, world, unit_us);
  emu_perturb_on[rank] = false;
}
inline void emu_perturb_enable(int rank, bool on) {
  std::lock_guard<std::mutex> lock(emu_perturb_mu);
  emu_perturb_on[rank] = on;
}
inline uint32_t emu_perturb_start_delay_us(int rank) {
  std::lock_guard<std::mutex> lock(emu_perturb_mu);
  return emu_perturb[rank].start_delay_us;
}
// Hold stream `s` back `us` microseconds: an operation that sleeps (the interposer's host function),
// then, for a late rank with settling on, waits until the run has settled.
inline void emu_perturb_hold(cudaStream_t s, uint32_t us) {
  bool settle;
  {
    std::lock_guard<std::mutex> lock(emu_perturb_mu);
    settle = emu_progress_on && s->rank >= 0 && s->rank < 64 && emu_perturb[s->rank].kind != CUCO_PERTURB_SCATTER;
  }
  s->enqueue(settle ? "perturbation hold, until the run settles" : "perturbation hold", [us, settle] {
    emu_mark(kEmuHeld);
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    if (settle) emu_settle();
    emu_mark(kEmuRunning);
  });
}
// Before one of the calling rank's ordering points of class `op` on stream `s`.
inline void emu_perturb_before(cudaStream_t s, int op) {
  const int r = emu_device;
  uint32_t us = 0;
  {
    std::lock_guard<std::mutex> lock(emu_perturb_mu);
    if (r < 0 || r >= 64 || !emu_perturb_on[r]) return;
    us = cuco_perturb_draw(&emu_perturb[r], op);
  }
  if (us && s) emu_perturb_hold(s, us);
}

