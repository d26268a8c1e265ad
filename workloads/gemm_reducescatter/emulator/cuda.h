// Emulator stub of the CUDA driver API header (see rs_emu.h): the types cuco_arrival.cuh's
// FlagWriter and FlagWaiter name. The CPU model of the runtime stands in for the rest (it offers
// cuStreamWriteValue64 only: a FlagWaiter's init fails there with cudaErrorSymbolNotFound).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

typedef enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 } CUresult;
typedef cudaStream_t CUstream;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef enum { CU_STREAM_WAIT_VALUE_GEQ = 0x0 } CUstreamWaitValue_flags;
