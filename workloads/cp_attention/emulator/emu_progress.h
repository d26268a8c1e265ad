// emu_progress.h: whether anything in an emulated run can still move (emu_runtime.h includes this
// after cuda_cpu.h). A schedule perturbation that makes a rank late (emu_perturb.h) holds its
// stream for the policy's time; on a GPU that is far longer than the peers need to run ahead, but
// here kernels run their CTAs one after another on a shared CPU, so a peer's kernel may take
// longer than the hold and the window a race needs may stay shut. With settling on (a driver's
// choice, emu_progress_on), such a hold lasts its time and then until the run has settled: every
// other part of it waits for something that cannot come without the held streams (or has ended).
// That is the limit of a longer and longer hold, a schedule a GPU may run, reached whatever the
// machine's load.
//
// The parts that move (actors) are the streams' threads and the drivers' rank threads. Each is
// running, waiting since epoch E (it found what it waits for missing after reading E), held, or
// done. The epoch grows after every change another actor may wait for: an operation finished or
// enqueued, an event recorded, a collective matched, a flag stored through cuda::atomic_ref or the
// runtime's store_release / atomic_add_release (CUCO_FLAG_STORED). A waiting actor looks again
// every millisecond, so its mark follows the epoch; one waiting since the current epoch has seen
// the latest of everything, and when all have, none can move. A kernel's wait is seen as a thread
// reading the same flag twice in a row with the same value while the epoch stood still
// (cuda::atomic_ref loads, the runtime's load_acquire: CUCO_FLAG_LOADED). A change this file does
// not see (a plain store another thread spins on) can only end a hold early, never make a correct
// candidate fail; a wait it does not see keeps the hold until the run's watchdog ends it, naming
// the stream held "until the run settles".
// With settling off (the default), every hook here costs a load of a bool and changes nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

inline bool emu_progress_on = false;  // set by a driver before its rank threads start

constexpr uint64_t kEmuRunning = 0, kEmuHeld = ~0ull, kEmuDone = ~0ull - 1;
struct EmuActor {
  std::atomic<uint64_t> state{kEmuRunning};  // kEmuRunning, kEmuHeld, kEmuDone or the epoch it waits since
};

inline std::mutex emu_progress_mu;  // the actors' list; what waiters on emu_progress_cv sleep under
inline std::condition_variable emu_progress_cv;
inline std::atomic<uint64_t> emu_epoch{1};
inline std::vector<EmuActor*> emu_actors;
inline thread_local EmuActor* emu_actor = nullptr;  // the calling thread's, if it is one

// A new actor (running), on the list from now on; its thread makes it its own with emu_actor_enter.
inline EmuActor* emu_actor_new() {
  EmuActor* a = new EmuActor();
  std::lock_guard<std::mutex> lock(emu_progress_mu);
  emu_actors.push_back(a);
  return a;
}
inline void emu_actor_enter(EmuActor* a) { emu_actor = a; }
inline void emu_mark(uint64_t state) {
  if (emu_progress_on && emu_actor) emu_actor->state.store(state);
}

// After a change another actor may wait for (made visible before this call).
inline void emu_moved() {
  if (!emu_progress_on) return;
  {
    std::lock_guard<std::mutex> lock(emu_progress_mu);
    emu_epoch.fetch_add(1);
  }
  emu_progress_cv.notify_all();
}

// cv.wait(lock, ready), the calling actor marked waiting while `ready` is false. The epoch is read
// before `ready`: whatever changes it after is followed by a newer epoch. With settling on, it
// looks again every millisecond, so that its mark follows the epoch (which other changes move).
template <class Ready>
void emu_wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Ready ready) {
  for (;;) {
    const uint64_t at = emu_epoch.load();
    if (ready()) break;
    emu_mark(at);
    if (emu_progress_on)
      cv.wait_for(lock, std::chrono::milliseconds(1));
    else
      cv.wait(lock);
  }
  emu_mark(kEmuRunning);
}

// After a flag load in device code: a thread that reads the same flag with the same value twice in
// a row, in the same fiber of the same CTA of the same operation, spins on it. It then sleeps
// until the epoch moves (at most 1 ms: a store this file does not see), marked waiting since the
// epoch read before that read. Otherwise it yields, as the loads always did.
struct EmuFlagRead {
  const void* flag = nullptr;
  uint64_t value = 0, epoch = 0, op = 0;
  int fiber = -2;
  unsigned bx = 0, by = 0, bz = 0;
  bool same(const EmuFlagRead& o) const {
    return flag == o.flag && value == o.value && op == o.op && fiber == o.fiber && bx == o.bx && by == o.by && bz == o.bz;
  }
};
inline thread_local EmuFlagRead emu_last_read;
inline thread_local uint64_t emu_op_serial = 0;  // the stream thread's operations, counted

inline void emu_flag_loaded(const void* flag, uint64_t value) {
  if (!emu_progress_on) {
    std::this_thread::yield();
    return;
  }
  EmuFlagRead now{flag, value, 0, emu_op_serial, emu_sched.current, blockIdx.x, blockIdx.y, blockIdx.z};
  if (now.same(emu_last_read)) {
    const uint64_t at = emu_last_read.epoch;
    emu_mark(at);
    {
      std::unique_lock<std::mutex> lock(emu_progress_mu);
      emu_progress_cv.wait_for(lock, std::chrono::milliseconds(1), [&] { return emu_epoch.load() != at; });
    }
    emu_mark(kEmuRunning);
  } else {
    std::this_thread::yield();
  }
  now.epoch = emu_epoch.load();
  emu_last_read = now;
}

// Until the run has settled: the calling actor marked held, every other one held, done, or waiting
// since the current epoch. Called by a perturbation's hold, on the held stream's thread. Holds that
// find the run settled at once end one at a time, in the order they began to wait (a late rank's
// copy stream and compute stream may both be held): the next one waits for the run to settle
// again after the first has moved on, as the next of two holds of equal length ends a little later.
inline uint64_t emu_settle_tickets = 0, emu_settle_next = 0;  // under emu_progress_mu
inline void emu_settle() {
  if (!emu_progress_on) return;
  emu_mark(kEmuHeld);
  std::unique_lock<std::mutex> lock(emu_progress_mu);
  const uint64_t ticket = emu_settle_tickets++;
  for (;;) {
    const uint64_t e = emu_epoch.load();  // stands still while the lock is held (emu_moved takes it)
    bool settled = ticket == emu_settle_next;
    for (size_t i = 0; settled && i < emu_actors.size(); ++i) {
      const uint64_t s = emu_actors[i]->state.load();
      settled = s == e || s == kEmuHeld || s == kEmuDone;
    }
    if (settled) break;
    // Woken by the next change; a new waiter changes nothing, so look again within 1 ms.
    emu_progress_cv.wait_for(lock, std::chrono::milliseconds(1));
  }
  emu_mark(kEmuRunning);  // before the next hold looks, which must see this stream move
  ++emu_settle_next;
}

// std::barrier for the drivers' rank threads, each marked waiting while it waits.
struct EmuHostBarrier {
  std::mutex mu;
  std::condition_variable cv;
  long n, arrived = 0;
  uint64_t generation = 0;
  explicit EmuHostBarrier(long count) : n(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t g = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      lock.unlock();
      cv.notify_all();
      emu_moved();
      return;
    }
    emu_wait(cv, lock, [&] { return generation != g; });
  }
};
