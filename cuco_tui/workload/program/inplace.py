"""A program that writes into its inputs (an in-place `dist.all_reduce(grad)` whose result it
returns, say), run as the harness's reference on views of the harness's input buffers, would change
what the candidate is then given at the same check, and what a float64 comparison starts from. The
guard finds it at the first call (each input compared with a copy taken before) and, from then on,
hands solution copies of its inputs, refreshed before each call. The copies cost a device copy of
the inputs per call, timed with the program: the guard says so in one line, which the harness adds
to the reference's warnings."""

from __future__ import annotations

from typing import Any


class InputGuard:
    def __init__(self, torch: Any, names: list[str]) -> None:
        self.torch = torch
        self.names = names  # the inputs' names, in solution's order
        self.mutates: bool | None = None  # None until the first call has been looked at
        self.copies: list[Any] = []

    def call(self, solution: Any, args: list[Any]) -> Any:
        """solution(*args), or on copies of args once it is known to write into them."""
        if self.mutates:
            for copy, arg in zip(self.copies, args):
                if copy is not None:
                    copy.copy_(arg)
            return solution(*[c if c is not None else a for c, a in zip(self.copies, args)])
        if self.mutates is False:
            return solution(*args)
        before = [a.clone() if self._tensor(a) else None for a in args]
        out = solution(*args)
        changed = [i for i, (a, b) in enumerate(zip(args, before)) if b is not None and not self._same(a, b)]
        self.mutates = bool(changed)
        if changed:
            out = self._apart(out, [args[i] for i in changed])  # a result that is a changed input outlives the undo
            for i in changed:
                args[i].copy_(before[i])  # what the candidate and the comparison are given stays as filled
            self.copies = [self.torch.empty_like(a) if self._tensor(a) else None for a in args]
            self.changed = [self.names[i] for i in changed]
        return out

    def warning(self) -> str:
        if not self.mutates:
            return ""
        return (f"solution writes into its input(s) {', '.join(self.changed)}: each call is given copies of its "
                f"inputs, and the copy is timed with it")

    def _apart(self, out: Any, written: list[Any]) -> Any:
        """`out` with each tensor that shares memory with a written input replaced by a copy."""
        ptrs = {w.untyped_storage().data_ptr() for w in written}
        if self._tensor(out):
            return out.clone() if out.untyped_storage().data_ptr() in ptrs else out
        if isinstance(out, (tuple, list)):
            parts = [self._apart(o, written) for o in out]
            return type(out)(*parts) if hasattr(out, "_fields") else type(out)(parts)  # a namedtuple, too
        return out

    def _tensor(self, value: Any) -> bool:
        return isinstance(value, self.torch.Tensor)

    def _same(self, a: Any, b: Any) -> bool:
        """Equal bit for bit where it matters: NaNs in the same places count as unchanged."""
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return bool(self.torch.equal(a, b))
