"""Names made safe for C: what a tensor or op name becomes in generated code and C headers.

    c_identifier("T_add.local")      -> "T_add_local"
    c_identifier("3x3")              -> "_3x3"
    c_identifier("int")              -> "_int"
    c_identifiers(["a.b", "a_b"])    -> ["a_b", "a_b_1"]     (unique within one signature)
    comment_text("a*/ b\\n#x")        -> "a* / b #x"           (safe inside /* ... */)

Users name placeholders and computations freely (``te.placeholder(..., name="a*/\\n#x")``);
code generation (LLVM argument names) and the exported C header (prototype, comments)
pass every such name through here, so no name can end a comment, start a preprocessor
line or be anything but an identifier in the generated text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# C11/C23 keywords and the spellings of <stdbool.h>/<stdint.h> a header may see.
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline "
    "int long register restrict return short signed sizeof static struct switch typedef union unsigned "
    "void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn "
    "_Static_assert _Thread_local alignas alignof bool constexpr false nullptr static_assert "
    "thread_local true typeof typeof_unqual _BitInt _Decimal32 _Decimal64 _Decimal128 asm "
    "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t NULL".split())

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def c_identifier(name: str) -> str:
    """``name`` as a valid C identifier: ASCII letters, digits and ``_`` kept, every other
    character ``_``; a leading ``_`` when it would start with a digit, be empty or be a C
    keyword.  Different names may map to the same identifier (see :func:`c_identifiers`)."""
    ident = _NOT_IDENT.sub("_", str(name))
    if not ident or ident[0].isdigit() or ident in C_KEYWORDS:
        ident = "_" + ident
    return ident


def c_identifiers(names: Iterable[str]) -> list:
    """:func:`c_identifier` of each of ``names``, made distinct (``_1``, ``_2``, ... appended
    to a later duplicate), in order: the parameter names of one C signature."""
    out: list = []
    taken: set = set()
    for name in names:
        ident = base = c_identifier(name)
        k = 1
        while ident in taken:
            ident, k = f"{base}_{k}", k + 1
        taken.add(ident)
        out.append(ident)
    return out


def comment_text(text: str) -> str:
    """``text`` safe inside a one-line C comment: line breaks become spaces, ``*/`` and
    ``/*`` are broken apart, other control characters dropped."""
    text = re.sub(r"[\r\n\t\v\f]+", " ", str(text))
    text = "".join(ch for ch in text if ch >= " " and ch != "\x7f")
    while "*/" in text or "/*" in text:
        text = text.replace("*/", "* /").replace("/*", "/ *")
    return text
