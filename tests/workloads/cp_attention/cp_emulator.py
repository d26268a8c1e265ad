"""cp_attention's CUDA code made ready for the CPU emulator (workloads/cp_attention/emulator/): the
PTX wrappers swapped for the emulator's, the templates' attention kernel and both softmax kernels
with their drivers, and whole rendered candidates (launches rewritten, the driver appended)."""

from cp_common import REF, W, _sequential
from emulator_helpers import with_driver

EMU = W.root / "emulator"

_SHIMS = """
inline void cp_async16(void* smem, const void* gmem) { emu_cp_async16(smem, gmem); }
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu_mma_16816(c, a, b0, b1); }
inline void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  emu_ldmatrix_x4_trans(r0, r1, r2, r3, row);
}
"""


def _emulated_ptx(text):
    """The kernel file's PTX wrappers swapped for the emulator's, its dynamic shared memory static."""
    start = text.index("__device__ __forceinline__ void cp_async16(")
    end = text.index("__device__ __forceinline__ uint32_t pack_bf16(")
    text = text[:start] + _SHIMS + text[end:]
    smem = "extern __shared__ __align__(16) unsigned char attn_smem[];"
    assert smem in text
    return text.replace(smem, "alignas(16) static thread_local unsigned char attn_smem[4 * kBK * (128 + 8) * 2];")


def _attention_source():
    """The templates' kernel file alone, with the emulator's PTX wrappers."""
    text = (W.root / "templates" / "flash_attention.cuh.j2").read_text()
    text = text.replace("{% raw %}", "").replace("{% endraw %}", "").replace("#include <cuda_bf16.h>\n", "")
    text = _emulated_ptx(text)
    text = text[:text.index("constexpr size_t attn_smem_bytes")]
    return '#include "cuda_cpu.h"\n' + text + '#include "attention_main.inc"\n'


def _candidate_source(src, score_budget=None):
    """A rendered candidate for the emulator: PTX wrappers swapped, launches rewritten, and the driver."""
    if "cp_async16(" in src:
        src = _emulated_ptx(src)
    if score_budget is not None:
        old = "constexpr size_t kScoreBudget = 3ull << 30;"
        assert old in src
        src = src.replace(old, f"constexpr size_t kScoreBudget = {score_budget};")
    return with_driver(src, "candidate_main.inc")


def _softmax_sources():
    """The reference's softmax kernel (a CuPy RawKernel) and the seed's."""
    ref = REF._SOFTMAX_SRC.replace('extern "C" ', "")
    sequential = _sequential()
    seed = sequential[sequential.index("constexpr size_t kScoreBudget"):sequential.index("struct Candidate {")]
    head = '#include "cuda_cpu.h"\n'
    return {"ref": head + ref + "#define PROBS_T unsigned short\n" + '#include "softmax_main.inc"\n',
            "seed": head + seed + "#define PROBS_T __nv_bfloat16\n" + '#include "softmax_main.inc"\n'}
