import pytest

from build_cache import shared_build_cache
from cuco_tui.harness.gpus import inventory


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    inv = inventory()
    if inv.count >= 1:
        return
    skip = pytest.mark.skip(reason=f"needs NVIDIA GPUs ({inv.problem}); run scripts/gpu-tests.sh on a GPU host")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CUCO_CACHE_DIR", str(shared_build_cache(tmp_path_factory)))
    yield


@pytest.fixture(autouse=True)
def _isolated_sessions(tmp_path_factory, monkeypatch):
    # A search without --session/--root makes its session in the user's sessions folder
    # (cuco_tui.search.sessions.sessions_root): tests get one of their own, never the user's.
    monkeypatch.setenv("CUCO_SESSIONS_DIR", str(tmp_path_factory.getbasetemp() / "cuco-sessions"))
    yield


@pytest.fixture(autouse=True)
def _no_anthropic_key(monkeypatch):
    # The agent is chosen from the environment (Claude when a key is set): tests never reach the
    # real API, and every test sees the same choice whatever the developer's shell holds.
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch):
    # Output to a pipe is as wide as COLUMNS says (cuco_tui.cli.common): a caller's terminal
    # (CI sets COLUMNS=80) must not wrap the lines the tests read. Tests of COLUMNS set it themselves.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
