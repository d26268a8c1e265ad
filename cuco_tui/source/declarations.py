"""Declarations in blanked code: the variables, members and parameters declared with a named type
(`tg::FusedGemm<Cfg> gemm;`, `const tg::RowLayout& l = c->layout;`, `int k = 0` in a `for`), and
the namespace aliases and using-directives in force, so that an analysis can tell which names
hold an object of a type it knows. Textual: a declaration is a type and a name at the start of a
statement, a member or a parameter; scopes are not tracked."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What may stand before a declaration's type: the start of a line, a statement, a block or a
# parameter list. Possessive white space: a blanked region (many lines of spaces) is crossed once,
# not once per line start and again on every backtrack.
_START = r"(?:^[ \t]*+|(?<=[;{}(,])\s*+)"
_SPECIFIERS = r"(?:(?:const|constexpr|static|inline|mutable|volatile|extern|register|__shared__|__device__|" \
              r"__constant__|__managed__)\s+)*"
_TEMPLATE_ARGS = r"(?:\s*<(?:[^;{}()<>]++|<[^;{}()<>]*+>)*+>)?"
_TYPE = (r"((?:(?:unsigned|signed|long|short)\s+)*(?:::\s*)?(?:[A-Za-z_]\w*+" + _TEMPLATE_ARGS + r"\s*::\s*)*"
         r"[A-Za-z_]\w*+" + _TEMPLATE_ARGS + r")")
_DECLARATOR = r"((?:\s*(?:[*&]+|\bconst\b|\b__restrict__\b)\s*)+|\s+)([A-Za-z_]\w*+)\s*(?=[;,=({)\[:])"
_DECLARATION = re.compile(_START + _SPECIFIERS + _TYPE + _DECLARATOR, re.M)
# Words that begin a statement without declaring anything, and words that are no type.
_NOT_TYPES = frozenset({
    "return", "else", "do", "case", "goto", "delete", "new", "throw", "using", "typedef", "namespace", "struct",
    "class", "union", "enum", "template", "typename", "public", "private", "protected", "friend", "operator",
    "co_return", "co_await", "co_yield", "sizeof", "default", "break", "continue",
})
# Words of a type that cannot be the declared name: `sizeof(unsigned long long)` declares nothing.
_TYPE_WORDS = frozenset({"unsigned", "signed", "long", "short", "int", "char", "float", "double", "void", "bool"})
_ALIAS = re.compile(r"\bnamespace\s+([A-Za-z_]\w*)\s*=\s*((?:::\s*)?[A-Za-z_][\w:\s]*?)\s*;")
_USING = re.compile(r"\busing\s+namespace\s+((?:::\s*)?[A-Za-z_][\w:\s]*?)\s*;")


@dataclass(frozen=True)
class Declaration:
    """A name declared with a type: `type` as written without specifiers, `*`/`&` or the name."""

    type: str
    name: str
    at: int  # offset of the name

    @property
    def type_name(self) -> str:
        """The type's own name: `FusedGemm` for `tg::FusedGemm<Cfg>`."""
        return _strip_templates(self.type).split("::")[-1].strip()

    @property
    def type_qualifier(self) -> str:
        """What stands before the type's own name: `tg` for `tg::FusedGemm<Cfg>`, "" for none."""
        parts = _strip_templates(self.type).split("::")
        return "::".join(p.strip() for p in parts[:-1])


@dataclass(frozen=True)
class Namespaces:
    """Namespace aliases (`namespace tg = cuco::tile_gemm;`) and using-directives in force."""

    aliases: dict[str, str] = field(default_factory=dict)
    used: tuple[str, ...] = ()

    def resolve(self, qualifier: str) -> str:
        """`qualifier` with a leading alias expanded and without a leading `::`."""
        q = qualifier.strip().removeprefix("::").strip()
        head, _, rest = q.partition("::")
        if head in self.aliases:
            q = self.aliases[head] + ("::" + rest if rest else "")
        return q

    def names(self, qualifier: str, namespace: str) -> bool:
        """Whether a name written with `qualifier` ("" for none) may be one of `namespace`: the
        qualifier resolves to it, or to its tail under a namespace in use."""
        q = self.resolve(qualifier)
        if q == namespace:
            return True
        return any((u + "::" + q if q else u) == namespace for u in self.used)


def read_declarations(code: str) -> list[Declaration]:
    """Every declaration with a named type in blanked code, in file order."""
    out = []
    for m in _DECLARATION.finditer(code):
        type_text = " ".join(m.group(1).split())
        first = re.match(r"[A-Za-z_]\w*", type_text.removeprefix("::").strip())
        name = m.group(3)
        if first is None or first.group(0) in _NOT_TYPES or name in _NOT_TYPES or name in _TYPE_WORDS:
            continue
        out.append(Declaration(type_text, name, m.start(3)))
    return out


def read_namespaces(code: str) -> Namespaces:
    aliases = {m.group(1): _normal(m.group(2)) for m in _ALIAS.finditer(code)}
    used = tuple(_normal(m.group(1)) for m in _USING.finditer(code))
    resolved = Namespaces(aliases)
    return Namespaces(aliases, tuple(resolved.resolve(u) for u in used))


def _normal(name: str) -> str:
    return re.sub(r"\s+", "", name).removeprefix("::")


def _strip_templates(type_text: str) -> str:
    out, depth = [], 0
    for ch in type_text:
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">" and depth > 0
    return "".join(out)
