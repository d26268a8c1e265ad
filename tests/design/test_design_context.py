"""The design context for agents: hardware facts (from NVML, an inventory and the toolchain's
NCCL headers), the capabilities they give, the backends' notes, and the context an agent reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuco_tui.design.context import (
    NOTES_DIR,
    HardwareFacts,
    NvLink,
    api_notes,
    capabilities_from,
    common_notes,
    design_context,
    hardware_facts,
    strategy_notes,
)
from cuco_tui.design.space import (
    BACKENDS,
    Capabilities,
    DesignError,
    DesignPoint,
)
from cuco_tui.harness.gpus import GpuInfo, GpuInventory, inventory


# ------------------------------------------------------------------ hardware facts


def test_hardware_facts_on_this_machine_never_raise():
    facts = hardware_facts()
    assert isinstance(facts, HardwareFacts)
    assert facts.gin is False and facts.gin_reason
    if inventory().count == 0:
        assert not facts.has_gpu and facts.gpu_count == 0 and facts.problem
        assert facts.sm_count is None and facts.nvlinks == ()
        assert "No GPU" in facts.render()
    assert facts.nccl_version == "" or re.fullmatch(r"\d+\.\d+\.\d+", facts.nccl_version)


def test_hardware_facts_without_gpus_say_so(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    facts = hardware_facts()
    assert not facts.has_gpu
    assert "CUCO_NO_GPU" in facts.problem
    text = facts.render()
    assert text.startswith("## Hardware") and "No GPU" in text and "GIN: not available" in text


def test_hardware_facts_read_the_nccl_headers_of_the_toolchain():
    from cuco_tui.toolchain.toolchain import discover

    tc = discover()
    if tc.nccl.include is None:
        pytest.skip("no NCCL headers here")
    facts = hardware_facts(inventory=GpuInventory((), problem="none"), toolchain=tc)
    header = (tc.nccl.include / "nccl.h").read_text()
    major = re.search(r"#define NCCL_MAJOR (\d+)", header).group(1)
    assert facts.nccl_version.startswith(major + ".")


def _two_h200(links: int = 18) -> GpuInventory:
    return GpuInventory((GpuInfo(0, "NVIDIA H200", 143771, 132, {1: links} if links else {}),
                         GpuInfo(1, "NVIDIA H200", 143771, 132, {0: links} if links else {})), driver="580.159.04")


def test_hardware_facts_from_an_inventory():
    facts = hardware_facts(inventory=_two_h200(), toolchain=None)
    assert (facts.gpu_model, facts.gpu_count, facts.sm_count, facts.memory_mib) == ("NVIDIA H200", 2, 132, 143771)
    assert facts.nvlinks == (NvLink(0, 1, 18),) and facts.links(1, 0) == 18 and facts.all_linked([0, 1])
    assert facts.gin is False and "one host" in facts.gin_reason and "RDMA" in facts.gin_reason
    text = facts.render()
    assert "2 x NVIDIA H200, 132 SMs" in text and "0-1: 18" in text and "580.159.04" in text


def test_capabilities_from_facts():
    linked = hardware_facts(inventory=_two_h200(), toolchain=None)
    assert capabilities_from(linked, 2) == Capabilities(gin=False, nvshmem=False, lsa=True, world=2)
    unlinked = hardware_facts(inventory=_two_h200(links=0), toolchain=None)
    assert capabilities_from(unlinked, 2).lsa is False
    assert "No NVLink between 0-1" in unlinked.render()
    assert capabilities_from(linked, 4).lsa is False  # more ranks than GPUs
    assert capabilities_from(linked, 1, gpus=[1]).lsa is True
    none = HardwareFacts(problem="no GPU")
    assert capabilities_from(none, 2) == Capabilities(gin=False, nvshmem=False, lsa=True, world=2)


# ------------------------------------------------------------------ notes and the design context


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_has_api_and_strategy_notes(backend):
    assert (NOTES_DIR / f"{backend}.md").exists()
    api, strategy = api_notes(backend), strategy_notes(backend)
    assert api and strategy and api != strategy
    assert "## " not in api and "## " not in strategy


def test_notes_say_what_matters():
    assert "two-barrier rule" in strategy_notes("nccl_lsa")
    assert "ncclGetLsaPointer" in api_notes("nccl_lsa")
    assert "cuco::store_release" in api_notes("cuda_ipc") and "cuco::atomic_add_release" in api_notes("cuda_ipc")
    assert "cuco::wait_geq" in api_notes("cuda_ipc")
    assert "no SMs" in Path(NOTES_DIR / "copy_engine.md").read_text()
    assert "195 GB/s" in strategy_notes("copy_engine") and "383 GB/s" in strategy_notes("copy_engine")
    assert "RDMA NIC" in api_notes("nccl_gin")
    assert "cuBLAS handle" in common_notes()
    assert "-rdc" in api_notes("nvshmem")


def test_notes_of_an_unknown_backend_are_refused():
    with pytest.raises(DesignError, match="unknown backend `mpi`"):
        api_notes("mpi")
    with pytest.raises(DesignError):
        strategy_notes("mpi")


FACTS = [HardwareFacts(nccl_version="2.28.9", problem="no NVIDIA driver answered"),
         hardware_facts(inventory=_two_h200(), toolchain=None)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("facts", FACTS, ids=["no-gpu", "two-h200"])
def test_design_context_holds_the_hardware_and_the_backends_notes(backend, facts):
    point = DesignPoint(backend=backend, issuer="host" if backend in ("nccl_host", "copy_engine") else "cta",
                        comm_sms="0" if backend in ("nccl_host", "copy_engine") else "all")
    text = design_context(point, facts)
    assert point.line() in text
    assert facts.render() in text and "## Hardware" in text
    assert api_notes(backend) in text and strategy_notes(backend) in text
    assert common_notes() in text
    others = text.split("## Other backends", 1)[1]
    assert "nccl_gin: not here" in others or backend == "nccl_gin"
    assert f"- {backend}," not in others
    if backend == "nccl_gin":
        assert "Not valid here" in text


def test_design_context_lists_the_valid_other_backends():
    text = design_context(DesignPoint(), FACTS[1])
    others = text.split("## Other backends for 2 ranks here", 1)[1]
    assert "- nccl_lsa, e.g. `backend=nccl_lsa" in others and "issuer=cta" in others
    assert "- copy_engine, e.g." in others and "- cuda_ipc, e.g." in others
    assert "- nvshmem: not here" in others
    unlinked = design_context(DesignPoint(), hardware_facts(inventory=_two_h200(links=0), toolchain=None))
    assert "- nccl_lsa: not here (the ranks are not all in one LSA team" in unlinked
