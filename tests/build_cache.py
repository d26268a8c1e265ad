"""Where a test run's compiles go (conftest gives it to every test)."""

import os
from pathlib import Path


def shared_build_cache(tmp_path_factory) -> Path:
    """The build cache every test of a run shares (compiles are slow), never the user's, unless
    CUCO_TEST_CACHE_DIR names one (scripts/gpu-tests.sh: a cache a device call warmed in parallel).
    Module fixtures that start `cuco` in a child process hand it this folder too."""
    if os.environ.get("CUCO_TEST_CACHE_DIR"):
        return Path(os.environ["CUCO_TEST_CACHE_DIR"])
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own: the workers share one cache
    return base / "cuco-cache" / "build"
