"""The launcher: a runtime run started as a process in its own session, under the receipt
wrapper (``python -m reconciler.node._wrapper``), with its handle, pid and `running` committed
in one transaction (spec 06 `qlfsm launch`).

Its own package, apart from ``reconciler.node``: the recovery passes use the node's receipts
and process identity, never the launcher, so they do not load it (nor ``subprocess``).
"""

from __future__ import annotations

from reconciler.launcher._launcher import (
    Launched,
    LaunchFailed,
    LaunchRefused,
    launch,
    new_token,
)

__all__ = ["LaunchFailed", "LaunchRefused", "Launched", "launch", "new_token"]
