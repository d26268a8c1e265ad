"""The ctypes mirror in harness/abi.py must agree with cuco_abi.h byte for byte."""

import ctypes
import shutil
import subprocess

import pytest

from cuco_tui.toolchain.toolchain import RUNTIME_INCLUDE
from cuco_tui.harness import abi

FIELDS = {
    "cuco_ctx": (abi.CContext, ["abi_version", "rank", "world", "device", "n_inputs", "n_outputs", "inputs",
                                "outputs", "n_dims", "trace_slots", "dim_names", "dims", "nccl_id", "trace", "error"]),
    "cuco_buffer": (abi.CBuffer, ["ptr", "bytes", "shape", "ndim", "dtype", "name"]),
    "cuco_wait_slot": (abi.CWaitSlot, ["state", "site", "kind", "peer", "id", "expected", "observed", "completed",
                                       "label", "function"]),
}


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_ctypes_layout_matches_the_c_header(tmp_path):
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "cuco_abi.h"', "int main(void) {"]
    for struct, (_, fields) in FIELDS.items():
        lines.append(f'printf("{struct} sizeof %zu\\n", sizeof({struct}));')
        for f in fields:
            lines.append(f'printf("{struct} {f} %zu\\n", offsetof({struct}, {f}));')
    lines.append('printf("version %d\\n", CUCO_ABI_VERSION); return 0; }')
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-I", str(RUNTIME_INCLUDE), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    c_side = {tuple(line.split()[:2]): int(line.split()[2]) for line in out if line.count(" ") == 2}
    assert int(out[-2].split()[1]) == abi.ABI_VERSION
    for struct, (cls, fields) in FIELDS.items():
        assert c_side[(struct, "sizeof")] == ctypes.sizeof(cls), struct
        for f in fields:
            assert c_side[(struct, f)] == getattr(cls, f).offset, f"{struct}.{f}"


def test_wait_slots_decode_and_skip_unused():
    slots = (abi.CWaitSlot * 4)()
    slots[1].state = 1
    slots[1].site = 42
    slots[1].kind = 3
    slots[1].peer = -1
    slots[1].id = 5
    slots[3].state = 2
    slots[3].kind = 1
    slots[3].peer = 1
    slots[3].expected = 4
    slots[3].observed = 4
    slots[3].completed = 9
    slots[3].label = b"arrived"
    slots[3].function = b"wait_flag"
    records = abi.decode_slots(bytes(slots))
    assert [r.slot for r in records] == [1, 3]
    assert records[0].state == "waiting" and records[0].kind == "barrier" and records[0].site == 42
    assert records[0].label == "" and records[0].function == ""
    assert records[1].state == "done" and records[1].kind == "flag" and records[1].completed == 9
    assert records[1].label == "arrived" and records[1].function == "wait_flag"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a C++ compiler")
def test_a_wait_site_keeps_its_label_and_line_and_cuts_long_labels(tmp_path):
    """cuco::WaitSite, built on the host as CUCO_WAIT_SITE makes it, with the label the slot gets."""
    src = tmp_path / "site.cpp"
    src.write_text(
        '#define __host__\n#define __device__\n#include <cstdio>\n#include "cuco_abi.h"\n'
        "namespace cuco {\n" + _wait_site_struct() + "}\n"
        '#define CUCO_WAIT_SITE(label) ::cuco::WaitSite((label), __LINE__)\n'
        "int main() {\n"
        '  cuco::WaitSite a = CUCO_WAIT_SITE("arrived");\n'
        '  cuco::WaitSite b = CUCO_WAIT_SITE("a-label-far-longer-than-the-slot-holds");\n'
        '  printf("%d %s|%d %s|%zu\\n", a.line, a.label, b.line, b.label, sizeof(cuco::WaitSite));\n}\n')
    exe = tmp_path / "site"
    subprocess.run(["g++", "-std=c++17", "-I", str(RUNTIME_INCLUDE), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()
    lines = src.read_text().splitlines()
    at = [i + 1 for i, line in enumerate(lines) if "= CUCO_WAIT_SITE(" in line]
    cut = "a-label-far-longer-than-the-slot-holds"[:abi.WAIT_LABEL_LEN - 1]
    assert out == f"{at[0]} arrived|{at[1]} {cut}|28"


def _wait_site_struct() -> str:
    """cuco::WaitSite exactly as the runtime header defines it (the header itself needs CUDA)."""
    text = (RUNTIME_INCLUDE / "cuco_runtime.cuh").read_text()
    start = text.index("struct WaitSite {")
    return text[start:text.index("};", start) + 2] + "\n"


def test_loading_a_library_without_the_abi_says_what_is_missing(tmp_path):
    src = tmp_path / "lib.c"
    src.write_text("int cuco_init(void* a, void** b) { return 0; }\n")
    lib = tmp_path / "lib.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    with pytest.raises(abi.AbiError, match="does not export cuco_launch, cuco_teardown"):
        abi.CandidateLibrary(lib)
