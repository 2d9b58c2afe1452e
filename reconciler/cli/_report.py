"""What a start-up pass did to each run, for a person, in lines of at most ``WIDTH`` columns
(docs/decisions.md D-22).

`startup` is wired into a service manager whose journal `systemctl status` cuts at the
terminal's width, so every line here fits ``WIDTH`` columns, measured AFTER the escaping rule
(``reconciler._escape``, D-14) and in terminal columns (an East Asian wide character is two).
A reason that does not fit is wrapped under its column (at most four lines, then shortened
with ``...``; its full text stays in `--json`). A row whose identifiers leave no room for a
reason is printed in a long form, one field a line. A suggested command is wrapped between
its words with ``\\`` line continuations, and a word too long for a line is cut into pieces
that the shell joins back (each piece quoted on its own), so what is printed is still the
command to paste.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reconciler._escape import clean, shell_word

WIDTH = 100
# The least room a reason gets on a table line; a row with less is printed in the long form.
MIN_REASON = 20
# A reason longer than its column is wrapped under it, at most this many lines (then "...").
MAX_REASON_LINES = 4
ELLIPSIS = "..."

# spec 04 "Summary" outcome -> what it means for the run, in plain words (D-22). `recovered`
# is split by how: a trusted receipt (rows 5/13: "completed"), `lost` written by this pass
# (rows 3, 4b, 7, 13), or decided by another writer during the pass (D-20:
# "decided elsewhere: <status now>", which this pass did not mark lost).
PLAIN = {"remaining": "kept running", "unresolved": "blocked", "failed": "failed"}
ELSEWHERE = "decided elsewhere"
# D-20's reason for a Run another writer decided meanwhile (reconciler.primary._pass).
ELSEWHERE_REASON = "decided_elsewhere:"
# The long form's row and outcome cells: "decided elsewhere: cancelled" fits whole.
LONG_CELL = 32


def columns(text: str) -> int:
    """Terminal columns of ``text`` (already through ``clean``: every character printable):
    an East Asian wide or full-width character is two, a combining mark none."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(
        2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
        for ch in text
        if not unicodedata.combining(ch)
    )


def _pieces(value: object) -> list[str]:
    """``clean(value)`` as the escaped form of each character: a cut between two pieces never
    falls inside an escape such as ``\\x1b``."""
    if value is None:
        return ["-"]
    return [clean(ch) for ch in str(value)]


def shorten(value: object, room: int) -> str:
    """``clean(value)`` in at most ``room`` columns, cut at a character and ended ``...``."""
    text = clean(value)
    if columns(text) <= room:
        return text
    out, used = [], 0
    for piece in _pieces(value):
        width = columns(piece)
        if used + width > room - len(ELLIPSIS):
            break
        out.append(piece)
        used += width
    return "".join(out) + ELLIPSIS


def wrap_cell(
    value: object, room: int, *, most: int = MAX_REASON_LINES, at_space: bool = True
) -> list[str]:
    """``clean(value)`` in lines of at most ``room`` columns, cut after a space where there is
    one (``at_space``; else anywhere between two characters' escapes, never inside one); more
    than ``most`` lines: the last one shortened with ``...``."""
    lines: list[str] = []
    line, used = "", 0
    for piece in _pieces(value):
        width = columns(piece)
        while used + width > room and line:
            cut = line.rfind(" ") if at_space else -1
            # Back to the last space, if any: the word starts the next line.
            done, line = (line[:cut], line[cut + 1 :]) if cut > 0 else (line, "")
            lines.append(done)
            used = columns(line)
        line += piece
        used += width
    lines.append(line)
    if len(lines) > most:
        lines = [*lines[: most - 1], shorten(" ".join(lines[most - 1 :]), room)]
    return lines


def _chunks(value: object, room: int) -> list[str]:
    """``clean(value)`` cut into lines of at most ``room`` columns (never inside an escape)."""
    return wrap_cell(value, room, most=len(_pieces(value)) + 1, at_space=False)


def wrap(line: str) -> str:
    """A line of prose (already escaped) in lines of at most ``WIDTH`` columns, cut after a
    clause (``; ``) where that is enough, else between words; continuation lines indented two
    columns. A line that fits is returned unchanged; a single word longer than a line is kept
    whole."""
    if columns(line) <= WIDTH:
        return line
    clauses = line.split("; ")
    out: list[str] = []
    for i, clause in enumerate(clauses):
        text = clause + (";" if i < len(clauses) - 1 else "")
        if out and columns(out[-1] + " " + text) <= WIDTH:
            out[-1] += " " + text
        else:
            out.extend(_words(("  " if out else "") + text))
    return "\n".join(out)


def _words(line: str) -> list[str]:
    body = line.lstrip(" ")
    out, current = [], line[: len(line) - len(body)]
    for word in body.split(" "):
        candidate = f"{current} {word}" if current.strip() else (current + word)
        if columns(candidate) <= WIDTH or not current.strip():
            current = candidate
        else:
            out.append(current)
            current = "  " + word
    out.append(current)
    return out


def outcome_words(candidate: Mapping[str, Any]) -> str:
    """The candidate's spec 04 outcome as what happened to the run: completed, lost, decided
    elsewhere (with the status another writer gave it), kept running, blocked or failed."""
    outcome = candidate.get("outcome")
    if outcome == "recovered":
        reason = str(candidate.get("reason", ""))
        if reason.startswith(ELSEWHERE_REASON):
            # D-20: another writer decided it during the pass; this pass marked nothing.
            return f"{ELSEWHERE}: {reason[len(ELSEWHERE_REASON) :]}"
        # spec 04 rows 5 and 13: a trusted receipt's reason is `receipt_<terminal>[...]`.
        return "completed" if reason.startswith("receipt_") else "lost"
    return PLAIN.get(str(outcome), clean(outcome))


def plain_counts(summary: Mapping[str, Any]) -> str:
    """``1 completed, 2 lost, 1 kept running, 0 blocked, 0 failed``: spec 04's counts with
    `recovered` split into what it means; ``N decided elsewhere`` after "lost" only when a
    Run was (D-20), so "lost" counts only the runs this pass marked lost."""
    kinds = [outcome_words(c) for c in summary.get("candidates", [])]
    completed = kinds.count("completed")
    elsewhere = sum(1 for k in kinds if k.startswith(ELSEWHERE + ":"))
    counts = {
        "completed": completed,
        "lost": int(summary.get("recovered", 0)) - completed - elsewhere,
        ELSEWHERE: elsewhere,
        "kept running": int(summary.get("remaining", 0)),
        "blocked": int(summary.get("unresolved", 0)),
        "failed": int(summary.get("failed", 0)),
    }
    return ", ".join(f"{n} {k}" for k, n in counts.items() if n or k != ELSEWHERE)


def _fitting(
    headers: Sequence[str], rows: Sequence[Sequence[object]], room: int
) -> tuple[list[list[str]], list[int], list[int]]:
    """Every row's cells but the last through ``clean``, the rows that stay in the table and
    its column widths: while the columns are wider than ``room`` in all, the row with the
    widest cells leaves the table for the long form."""
    fixed = len(headers) - 1
    cells = [[clean(v) for v in row[:fixed]] for row in rows]
    fitting = list(range(len(rows)))

    def widths(chosen: list[int]) -> list[int]:
        return [
            max([columns(headers[i])] + [columns(cells[r][i]) for r in chosen])
            for i in range(fixed)
        ]

    ws = widths(fitting)
    while fitting and sum(ws) > room:
        fitting.remove(max(fitting, key=lambda r: sum(columns(c) for c in cells[r])))
        ws = widths(fitting)
    return cells, fitting, ws


def _line(cells: Sequence[str], ws: Sequence[int]) -> str:
    return "  ".join(c + " " * (w - columns(c)) for c, w in zip(cells, ws, strict=True))


def _rule(ws: Sequence[int]) -> str:
    return "  ".join("-" * w for w in ws)


def _hanging(lead: str, value: object, width: int) -> list[str]:
    """``lead`` and ``value`` wrapped as a reason (:func:`wrap_cell`) in the columns after it,
    its continuation lines under its first character."""
    first, *more = wrap_cell(value, width - columns(lead))
    return [lead + first, *(" " * columns(lead) + part for part in more)]


def _long_form(headers: Sequence[str], row: Sequence[object], upto: int, lead: str) -> list[str]:
    """A row that left the table: its first cell (cut into lines if it must be), then each
    cell before ``upto`` on lines of its own, ``    HEADER value``, then ``lead`` and its last
    cell (the reason) wrapped as :func:`_hanging`."""
    lines = _chunks(row[0], WIDTH)
    for header, value in zip(headers[1:upto], row[1:upto], strict=True):
        cell = f"    {header} "
        lines.extend(cell + part for part in _chunks(value, WIDTH - columns(cell)))
    return lines + _hanging(lead, row[-1], WIDTH)


def fit_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """An aligned table whose last column (the reason) is wrapped under itself so that no line
    is wider than ``WIDTH``; every cell through ``clean``. A row whose other cells leave less than
    MIN_REASON columns is printed below the table in the long form instead (its first cell,
    then each other field on a line of its own, indented)."""
    fixed = len(headers) - 1
    cells, fitting, ws = _fitting(headers, rows, WIDTH - 2 * fixed - MIN_REASON)
    room = WIDTH - sum(ws) - 2 * fixed
    reasons = {r: wrap_cell(rows[r][fixed], room) for r in fitting}
    last = max([columns(headers[fixed])] + [columns(t) for v in reasons.values() for t in v])
    lines = []
    if fitting:
        lines.extend([_line(headers, [*ws, last]).rstrip(), _rule([*ws, last])])
        under = " " * (sum(ws) + 2 * fixed)  # a wrapped reason's lines, under its column
        for r in fitting:
            first, *more = reasons[r]
            lines.append(f"{_line(cells[r], ws)}  {first}".rstrip())
            lines.extend(under + part for part in more)
    for r in [r for r in range(len(rows)) if r not in fitting]:
        # The long form: the run id, any other identifier on a line of its own, then
        # "row R, OUTCOME: reason" (the last three columns).
        row, outcome, _ = rows[r][-3:]
        lead = f"    {headers[-3]} {shorten(row, LONG_CELL)}, {shorten(outcome, LONG_CELL)}: "
        lines.extend(_long_form(headers, rows[r], len(headers) - 3, lead))
    return lines


def command_lines(words: Sequence[tuple[str, object | None]]) -> list[str]:
    """A command to paste, ``words`` as (flag or literal, value or None) pairs, wrapped at
    ``WIDTH`` with `` \\`` continuations, indented two columns (continuation lines four). Each
    value is one shell word (``shell_word``); a value too long for a line is cut into pieces,
    each a shell word of its own on a line of its own from the first column, that the shell
    joins back into one (``'a'\\<newline>'b'`` is ``ab``)."""
    lines: list[str] = []
    line = "  "
    for i, (flag, value) in enumerate(words):
        token = flag if value is None else f"{flag} {shell_word(value)}"
        reserve = 0 if i == len(words) - 1 else 2  # the " \" that ends a line that is continued
        sep = "" if line.strip() == "" else " "
        if columns(line + sep + token) + reserve <= WIDTH:
            line += sep + token
            continue
        if line.strip():
            lines.append(line + " \\")
            line = "    "
        # A literal qlfsm wrote itself is kept whole, even too long for a line of its own.
        if columns(line + token) + reserve <= WIDTH or value is None:
            line += token
            continue
        # Too long for a line of its own: the flag, then the value in joined pieces.
        line += flag
        lines.append(line + " \\")
        # The pieces of one word start at the first column: the shell drops a backslash-
        # newline, so an indent there would split the word in two.
        *parts, line = _word_pieces(str(value), WIDTH - 1)
        lines.extend(part + "\\" for part in parts)
    lines.append(line)
    return lines


def _word_pieces(value: str, room: int) -> list[str]:
    """``value`` as shell words of at most ``room`` columns each, whose concatenation the
    shell reads as ``value``."""
    parts: list[str] = []
    chunk = ""
    for ch in value:
        if chunk and columns(shell_word(chunk + ch)) > room:
            parts.append(shell_word(chunk))
            chunk = ""
        chunk += ch
    parts.append(shell_word(chunk))
    return parts


def candidate_lines(summary: Mapping[str, Any], *, reconcile: bool = False) -> list[str]:
    """Every candidate decided or left, one table line each: run, row, what happened to it in
    plain words, reason (`startup`); `reconcile` keeps its attempt column and spec 04's
    outcome words."""
    headers = ["run", *(["attempt"] if reconcile else []), "row", "outcome", "reason"]
    rows = [
        [
            c.get("run_id"),
            *([c.get("attempt_id") or "-"] if reconcile else []),
            c.get("row"),
            c.get("outcome") if reconcile else outcome_words(c),
            c.get("reason"),
        ]
        for c in summary.get("candidates", [])
    ]
    return fit_table(headers, rows) if rows else []


def reason_below_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """An aligned table of every column but the last, each row followed by its last column
    (the reason) on lines of its own, ``    HEADER: reason``, wrapped as ``fit_table`` wraps a
    reason (cut after a space, at most four lines, then ``...``), continuation lines under
    the reason's first character. For a table whose other columns leave a reason no room
    beside them (the demo's, D-22). A row whose other cells are wider than ``WIDTH`` leaves
    the table for the long form: its first cell, then each other cell on a line of its own,
    ``    HEADER value``, then its reason."""
    fixed = len(headers) - 1
    cells, fitting, ws = _fitting(headers, rows, WIDTH - 2 * (fixed - 1))
    lead = f"    {headers[fixed]}: "
    lines: list[str] = []
    if fitting:
        lines.extend([_line(headers[:fixed], ws).rstrip(), _rule(ws)])
        for r in fitting:
            lines.append(_line(cells[r], ws).rstrip())
            lines.extend(_hanging(lead, rows[r][fixed], WIDTH))
    for r in [r for r in range(len(rows)) if r not in fitting]:
        lines.extend(_long_form(headers, rows[r], fixed, lead))
    return lines
