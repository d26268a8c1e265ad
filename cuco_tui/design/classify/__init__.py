"""A static classifier of candidates: what the code of the EVOLVE blocks shows about each design
dimension, and where that disagrees with the `// cuco-design:` line the candidate declares.

The reading is textual (the source model of `cuco_tui.source`: comments and literals blanked, no
preprocessor, no compiler) and deliberately conservative: `classify` records what it sees, with
line numbers, and `check_declaration` warns only where the code clearly contradicts the
declaration. A missing or unparseable design line is the one error; every contradiction is a
warning, since the lineage can still store and measure the candidate.

One reader per dimension, each with its rule for the declaration:
- backend (`backend`): the calls that move data. NCCL host collectives and point-to-point
  (nccl_host); LSA pointers and barriers of the NCCL device API (nccl_lsa); `ncclGin` (nccl_gin);
  kernels that store through CUDA-IPC peer pointers (cuda_ipc); `cudaMemcpy*Async` into or out of
  peer memory, `cudaMemcpyPeerAsync` (copy_engine); `nvshmem_*` calls (nvshmem). Allocation
  helpers (`cuco::symmetric_alloc`, `cuco::peer_alloc`) and flag kernels are setup and signals:
  they name a backend but do not make it the one that moves the data.
- streams (`streams`): 1 (the harness's) + the `cudaStreamCreate*` calls.
- placement (`placement`): one kernel that both communicates and computes (fused): a kernel that
  waits on arrival flags (`cuco::wait_geq`, ...) and computes, the candidate's own or the
  runtime's `FusedGemm`; compute issued on a stream other than the communication's (overlap
  across streams); or neither (sequential).
- chunk (`chunk`): host loops around the transfers: over peers (shard) or over pieces (a count,
  a constant's or a fused GEMM row layout's `make_row_layout(..., chunks, ...)`).
- sync (`sync`): per-peer flag waits (`cuco::wait_geq`, acquire loads, GIN/NVSHMEM signal waits,
  event waits in loops) against barriers and collectives.
- issuer (`issuer`): host API transfers against kernels that move data.
- comm_sms (`comm_sms`): the grid of the kernels that move data, when it is a literal or a constant.

`evidence` holds the records, `reading` the per-candidate state the readers share, `kernels` and
`facts` what each launch and device function does, `peers` what reaches peer memory, `tile_gemm`
what the fused GEMM runtime's kernels, launcher and movers do (their code is not in the
candidate): `FusedGemm::launch`, `FusedGemmLib::launch` and `fused_gemm_kernel` wait per row
chunk and compute, `ce_copy` is a copy-engine transfer, `push_chunks` a store kernel,
`FlagWriter::post` a signal.
"""

from cuco_tui.design.classify.classifier import classify
from cuco_tui.design.classify.comm_sms import comm_sms_for_blocks
from cuco_tui.design.classify.declaration import check_declaration
from cuco_tui.design.classify.evidence import Evidence, KernelLaunch, Site

__all__ = [
    "Site",
    "KernelLaunch",
    "Evidence",
    "classify",
    "check_declaration",
    "comm_sms_for_blocks",
]
