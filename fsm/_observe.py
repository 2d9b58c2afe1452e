"""Who listens while the machines decide: a registry the machine builders consult.

Pure: a list and a protocol, no I/O. Empty on every product path, and then nothing changes:
the builders (``Lifecycle``, ``DecisionEngine``) add their reporting callbacks to the
`transitions` machine only when a listener is registered at BUILD time, so a machine built
with nobody listening is exactly the machine it always was. ``fsm.listen`` registers one and
rebuilds the cached machines; while anyone listens the memos of plans and decisions are not
filled (a memo hit would decide without the machine, so without its callbacks).
"""

from __future__ import annotations

from typing import Protocol


class Listener(Protocol):
    """What the machines report, through `transitions`' own callbacks."""

    def edge(self, machine: str, source: str, trigger: str, dest: str, guard: str | None) -> None:
        """A lifecycle machine took ``source --trigger [guard]--> dest`` (its ``after``)."""

    def case(self, machine: str, row: str, state: str, then: str, guard: str) -> None:
        """A decision machine took ``row``'s case ``state [guard] -> then`` (its ``after``)."""

    def guard(self, machine: str, name: str, held: bool) -> None:
        """``machine`` evaluated its condition ``name`` (the named guard): ``held`` or not."""


# Read by the builders at build time and by the reporting callbacks when they run.
LISTENERS: list[Listener] = []
