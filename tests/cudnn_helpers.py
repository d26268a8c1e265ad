"""A cuDNN installation as find_cudnn sees one, made of empty files: shared by the attention
library's tests (tests/toolchain) and `cuco doctor`'s (tests/cli)."""

from __future__ import annotations

from pathlib import Path


def fake_cudnn(root: Path, cudnn_version: tuple[int, int, int] = (9, 10, 2),
               frontend_version: tuple[int, int, int] = (1, 13, 0)) -> dict[str, str]:
    """Folders that look like cuDNN 9.10.2, the frontend 1.13.0 and NVRTC, with empty headers and
    libraries: find_cudnn is satisfied, nvcc is not. Returns the environment that names them."""
    home, frontend, cuda = root / "cudnn", root / "frontend", root / "cuda"
    for d in (home / "include", home / "lib", frontend, cuda / "lib64"):
        d.mkdir(parents=True)
    (home / "include" / "cudnn.h").touch()
    (home / "include" / "cudnn_version.h").write_text(
        "#define CUDNN_MAJOR %d\n#define CUDNN_MINOR %d\n#define CUDNN_PATCHLEVEL %d\n" % cudnn_version)
    (home / "lib" / "libcudnn.so.9").touch()
    (frontend / "cudnn_frontend.h").touch()
    (frontend / "cudnn_frontend_version.h").write_text(
        "#define CUDNN_FRONTEND_MAJOR_VERSION %d\n#define CUDNN_FRONTEND_MINOR_VERSION %d\n"
        "#define CUDNN_FRONTEND_PATCH_VERSION %d\n" % frontend_version)
    (cuda / "lib64" / "libnvrtc.so.13").touch()
    return {"CUCO_CUDNN_HOME": str(home), "CUCO_CUDNN_FRONTEND_INCLUDE": str(frontend), "CUDA_HOME": str(cuda)}
