"""The one escaping rule for text qlfsm did not write itself (docs/decisions.md D-14).

Text from the database, a receipt, `/proc`, the environment or an argument may hold anything: a
run id with CR LF would print a second, forged `verdict:` line; ESC/CSI/OSC, BEL, C1 controls
and bidi overrides would be acted on by the terminal; XML 1.0 forbids most C0 controls. So every
such text is shown through one of these, each built on :func:`clean`:

- :func:`clean`: for a person (a terminal line, an SVG/DOT text): every character that
  ``str.isprintable()`` rejects (C0 and DEL, C1, line/paragraph separators, format characters
  such as the bidi controls, surrogates, unassigned code points, spaces other than U+0020) is
  written as its Python escape (``\\r``, ``\\x1b``, ``\\u202e``, ``\\U000e0001``): visible,
  never interpreted, and valid XML text.
- :func:`one_line`: a whole stderr message: whitespace runs one space, then :func:`clean`.
- :func:`shell_word`: a value inside a command the output suggests (``qlfsm explain --run ...``):
  ``shlex.quote`` when it is printable, else bash's ANSI-C quoting (``$'run\\r\\n'``), which a
  person can still paste and which holds no character a terminal acts on.
- :func:`json_safe`: a JSON document (``json.dumps(..., ensure_ascii=False)``, which escapes C0
  only): DEL, C1, U+2028/U+2029, the bidi controls and lone surrogates written as ``\\uXXXX``,
  every other character unchanged, so that one object is one line for ``str.splitlines()`` too.

Standard library only.
"""

from __future__ import annotations

import json
import re
import shlex

# In a JSON string these are legal raw, but splitlines() cuts at U+0085/U+2028/U+2029 (and at
# nothing else json.dumps leaves raw), a terminal acts on C1 (U+009B is CSI), the bidi
# controls reorder what a person reads, and a lone surrogate cannot be encoded as UTF-8.
JSON_ESCAPED = (
    "\x7f-\x9f"  # DEL and the C1 controls
    "\u061c\u200e\u200f"  # ALM, LRM, RLM
    "\u2028\u2029"  # line and paragraph separator
    "\u202a-\u202e"  # LRE, RLE, PDF, LRO, RLO
    "\u2066-\u2069"  # LRI, RLI, FSI, PDI
    "\ud800-\udfff"  # lone surrogates (a surrogateescape'd argument or path)
)


def _escape(ch: str) -> str:
    return ascii(ch)[1:-1]


def clean(value: object) -> str:
    """``value`` as text a terminal, a viewer or an XML parser shows as it is: every character
    ``str.isprintable()`` rejects written as its escape (``\\x1b``); None is ``-``."""
    text = "-" if value is None else str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def one_line(text: str) -> str:
    """``text`` as one line (a stderr message): its whitespace runs (CR LF included) one space,
    then anything else a terminal would act on escaped (:func:`clean`); D-14, the line may
    repeat an argument or a path."""
    return clean(" ".join(text.split()))


def shell_word(value: object) -> str:
    """``value`` as one shell word in a command the output suggests: ``shlex.quote`` when it is
    printable, else bash's ``$'...'`` with each unprintable character as an escape (a byte
    that ``surrogateescape`` decoded as ``\\xHH``, as bash reads it back)."""
    text = str(value)
    if text.isprintable():
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "'\\":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ord(ch) < 0x80:
            out.append(_escape(ch))  # \r, \x1b: one byte, as bash reads them
        else:  # bash's \xHH is a byte: a character above ASCII is its \u/\U code point
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "$'" + "".join(out) + "'"


def json_safe(text: str) -> str:
    """A JSON document (from ``json.dumps(..., ensure_ascii=False)``) with DEL, C1, the line and
    paragraph separators, the bidi controls and lone surrogates as ``\\uXXXX``. Outside its
    strings JSON is ASCII, so every such character is inside a string, where the escape means
    the same character: the document parses to the same value."""
    if text.isascii() and "\x7f" not in text:
        return text
    return re.sub(f"[{JSON_ESCAPED}]", lambda m: f"\\u{ord(m.group()):04x}", text)


def json_line(obj: object) -> str:
    """``obj`` as one line of JSON (no newline at the end): ``json.dumps`` without ASCII-only
    escaping (other non-ASCII text stays readable), through :func:`json_safe`."""
    return json_safe(json.dumps(obj, ensure_ascii=False, sort_keys=False))
