"""Kernel launches in blanked code: `kernel<<<grid, block, smem, stream>>>(args)` (template
arguments and namespaces allowed before the `<<<`), and `cudaLaunchKernel` /
`cudaLaunchCooperativeKernel(func, grid, block, args, smem, stream)`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cuco_tui.source.arguments import Arg, read_call, split_args
from cuco_tui.source.expressions import last_name
from cuco_tui.source.lexer import matching_angle

_CHEVRONS = re.compile(r"<<<")
_LAUNCH_API = re.compile(r"\bcudaLaunch(?:Cooperative)?Kernel\s*\(")
_NAME_BEFORE = re.compile(r"[A-Za-z_][\w:]*$")
_NAME_WINDOW = 200
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_QUALIFIED = re.compile(r"(?:::)?[A-Za-z_][\w:]*")


@dataclass(frozen=True)
class Launch:
    """One kernel launch. `config` is (grid, block, shared memory, stream) as far as written;
    `args` the kernel's arguments, None for a `<<<...>>>` not followed by an argument list."""

    kernel: str  # the kernel's own name, without namespaces or template arguments
    at: int  # offset of the kernel's name (of `cudaLaunchKernel` for the API form)
    config_at: int  # offset of `<<<` (of `cudaLaunchKernel` for the API form)
    config: tuple[Arg, ...]
    args: tuple[Arg, ...] | None
    via: Literal["chevrons", "api"] = "chevrons"
    qualifier: str = ""  # the namespaces written before the kernel's name: `tg` of `tg::push_chunks<...>`

    def config_text(self, index: int, default: str = "") -> str:
        return self.config[index].text if index < len(self.config) else default

    @property
    def grid(self) -> str:
        return self.config_text(0)

    @property
    def block(self) -> str:
        return self.config_text(1)

    @property
    def stream(self) -> str:
        return self.config_text(3)


def read_launches(code: str) -> list[Launch]:
    """Every kernel launch in blanked code, in file order."""
    out = [launch for m in _CHEVRONS.finditer(code) if (launch := _chevron_launch(code, m.start()))]
    for m in _LAUNCH_API.finditer(code):
        call = read_call(code, m.end() - 1)
        if call is None or len(call.args) < 3:
            continue
        a = call.args
        func = re.sub(r"\([^()]*\)", "", a[0].text) or a[0].text
        func = _TEMPLATE_ARGS.sub("", _TEMPLATE_ARGS.sub("", func))  # `k<Cfg<1>>` is kernel k
        kernel = last_name(func)
        smem = a[4] if len(a) > 4 else Arg("0", call.close_at)
        stream = a[5] if len(a) > 5 else Arg("0", call.close_at)
        written = _QUALIFIED.search(func)
        out.append(Launch(kernel, m.start(), m.start(), (a[1], a[2], smem, stream), a[3:4], "api",
                          _qualifier_of(written.group(0)) if written else ""))
    return sorted(out, key=lambda launch: launch.at)


def _chevron_launch(code: str, lt: int) -> Launch | None:
    j = _skip_space_back(code, lt)
    if j > 0 and code[j - 1] == ">":  # template arguments: the name stands before their '<'
        j = matching_angle(code, j - 1)
        if j < 0:
            return None
        j = _skip_space_back(code, j)
    name = _NAME_BEFORE.search(code, max(0, j - _NAME_WINDOW), j)
    end = code.find(">>>", lt + 3)
    if name is None or end < 0:
        return None
    config = tuple(split_args(code, lt + 3, end))
    paren = end + 3
    while paren < len(code) and code[paren].isspace():
        paren += 1
    call = read_call(code, paren) if paren < len(code) and code[paren] == "(" else None
    return Launch(name.group(0).split("::")[-1], name.start(), lt, config, call.args if call else None,
                  qualifier=_qualifier_of(name.group(0)))


def _qualifier_of(qualified: str) -> str:
    """`a::b` of `a::b::k`; "" for a bare name."""
    return qualified.rpartition("::")[0].strip()


def _skip_space_back(code: str, k: int) -> int:
    while k > 0 and code[k - 1].isspace():
        k -= 1
    return k
