/* cuco_abi.h: the C ABI between the harness (Python, ctypes) and a candidate (.so).
 *
 * Plain C on purpose: the harness mirrors these structs with ctypes, and a CPU test
 * compiles this header with gcc to check that both sides agree on every offset.
 * Bump CUCO_ABI_VERSION whenever a struct changes.
 *
 * A candidate exports exactly three functions:
 *   int cuco_init(cuco_ctx* ctx, void** state);     once per rank and problem shape
 *   int cuco_launch(void* state, cudaStream_t s);   one iteration, enqueued on s
 *   int cuco_teardown(void* state);                 frees what init created
 * Each returns 0 on success; on failure it writes a sentence into ctx->error.
 * ctx stays valid and unchanged from cuco_init until cuco_teardown returns.
 */
#ifndef CUCO_ABI_H_
#define CUCO_ABI_H_

#include <stdint.h>

#define CUCO_ABI_VERSION 3
#define CUCO_MAX_BUFFERS 8
#define CUCO_MAX_DIMS 8
#define CUCO_NAME_LEN 16
#define CUCO_ERROR_LEN 1024
#define CUCO_NCCL_ID_BYTES 128
#define CUCO_WAIT_LABEL_LEN 24
#define CUCO_WAIT_FUNCTION_LEN 32

/* Element types of harness buffers. */
enum cuco_dtype { CUCO_BF16 = 1, CUCO_F16 = 2, CUCO_F32 = 3, CUCO_I32 = 4, CUCO_I64 = 5, CUCO_U8 = 6 };

typedef struct cuco_buffer {
  void* ptr;                   /* device pointer on this rank's GPU (plain cudaMalloc memory) */
  uint64_t bytes;
  int64_t shape[4];
  int32_t ndim;
  int32_t dtype;               /* enum cuco_dtype */
  char name[CUCO_NAME_LEN];
} cuco_buffer;

/* One wait site's state, per block: written by the device into pinned, mapped host
 * memory so that the harness can read it while a kernel hangs. */
enum cuco_wait_state { CUCO_WAIT_IDLE = 0, CUCO_WAIT_WAITING = 1, CUCO_WAIT_DONE = 2 };
enum cuco_wait_kind { CUCO_WAIT_FLAG = 1, CUCO_WAIT_SIGNAL = 2, CUCO_WAIT_BARRIER = 3 };

typedef struct cuco_wait_slot {
  uint32_t state;              /* enum cuco_wait_state */
  int32_t site;                /* source line of the wait: where the host launched it (a cuco::WaitSite,
                                  CUCO_WAIT_SITE), else the device line (CUCO_SITE) */
  int32_t kind;                /* enum cuco_wait_kind */
  int32_t peer;                /* rank waited on; -1 for a barrier of the whole team */
  uint64_t id;                 /* flag, signal or barrier id */
  uint64_t expected;           /* value the wait needs (>=) */
  uint64_t observed;           /* last value seen while waiting */
  uint64_t completed;          /* recorded waits this slot has finished: progress (a flag wait
                                  satisfied within the grace polls is not recorded) */
  char label[CUCO_WAIT_LABEL_LEN]; /* the wait's name ("ready", "arrived"; NUL-padded), "" when unnamed */
  char function[CUCO_WAIT_FUNCTION_LEN]; /* the function whose code waits (the kernel, or the device function
                                  it calls), by name: the deadlock report finds where the candidate launched
                                  the kernel from it (NUL-padded; longer names are cut) */
} cuco_wait_slot;

typedef struct cuco_ctx {
  int32_t abi_version;
  int32_t rank;
  int32_t world;
  int32_t device;              /* CUDA device ordinal of this rank */
  int32_t n_inputs;
  int32_t n_outputs;
  cuco_buffer inputs[CUCO_MAX_BUFFERS];
  cuco_buffer outputs[CUCO_MAX_BUFFERS];
  int32_t n_dims;
  int32_t trace_slots;         /* number of cuco_wait_slot entries at trace */
  char dim_names[CUCO_MAX_DIMS][CUCO_NAME_LEN];
  int64_t dims[CUCO_MAX_DIMS]; /* the problem shape, e.g. M, K, N */
  unsigned char nccl_id[CUCO_NCCL_ID_BYTES]; /* fresh per init, for the candidate's own communicator */
  cuco_wait_slot* trace;       /* device-visible pointer to pinned, mapped host memory */
  char error[CUCO_ERROR_LEN];  /* written by the candidate when a call fails */
} cuco_ctx;

#endif /* CUCO_ABI_H_ */
