"""`qlfsm startup --metrics-file PATH`: what the start-up did, in the Prometheus text exposition
format, for node_exporter's textfile collector (docs/decisions.md D-22; docs/operations.md
"Metrics").

``prometheus_client`` is an optional extra (``qlfsm[metrics]``) and is imported only when the
flag is given, before anything is read or written: without it `startup` refuses the flag in
one line naming the extra (exit 2). The file is replaced atomically (a temporary file in the
same directory, fsync, rename, fsync of the directory), so the collector reads the previous
start-up's file or this one, never a part. A file that cannot be written after the start-up
is one warning line: the start-up is done and its verdict (the exit code) stands, as for the
sweep; the previous file is left as it was.

Labels are bounded (ADR-0001 §16: no run id, task id or message in a label): the executor is
``local_process``, ``other`` or ``none`` (no Attempt), the origins are the seven reviewed ones,
the profile, assessment and stop reason are ADR-0449 enums.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from typing import Any

from reconciler._atomic import replace_file
from reconciler._escape import shell_word
from reconciler._reports import StartupReport
from reconciler.cli._exit import UsageError
from reconciler.cli._guard import say
from reconciler.primary import RESULTS

EXTRA = "metrics"
# node_exporter's textfile collector reads `*.prom` files only.
SUFFIX = ".prom"
SHADOW_STATES = ("disabled", "profile_rejected", "reconciled", "incomplete", "failed")
PASSES = ("normalize", "shadow", "primary", "sweep", "total")


def check_metrics_file(path: str) -> Any:
    """Before anything is read or written: ``prometheus_client`` importable (else a UsageError
    naming the extra) and ``path`` a ``*.prom`` file in an existing directory. Returns the
    ``prometheus_client`` module."""
    try:
        import prometheus_client
    except ImportError as exc:
        raise UsageError(
            f"--metrics-file needs the optional extra `{EXTRA}` (prometheus_client), which is "
            f"not installed: pip install 'qlfsm[{EXTRA}]'; nothing was done"
        ) from exc
    if not path.endswith(SUFFIX) or os.path.basename(path) == SUFFIX:
        raise UsageError(
            f"--metrics-file {path!r}: node_exporter's textfile collector reads only *{SUFFIX} "
            f"files; name it like qlfsm{SUFFIX}"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(
            f"--metrics-file {path!r}: directory {parent!r} does not exist; create it (the "
            "textfile collector's --collector.textfile.directory)"
        )
    if os.path.isdir(path):
        raise UsageError(f"--metrics-file {path!r} is a directory; name a file in it")
    return prometheus_client


def executors(db: str, summary: Mapping[str, Any]) -> dict[str, str]:
    """attempt id -> executor label for the candidates that have an Attempt. An Attempt's
    executor type is fixed when it is created, so reading it after the pass is what the pass
    saw. Unreadable: every label is ``other`` (the counts stay right)."""
    ids = [str(c["attempt_id"]) for c in summary.get("candidates", []) if c.get("attempt_id")]
    if not ids:
        return {}
    found: dict[str, str] = {}
    with contextlib.suppress(Exception):
        from storage import connect

        with contextlib.closing(connect(db, read_only=True)) as conn:
            marks = ",".join("?" * len(ids))
            rows = conn.execute(
                f'SELECT id, executor_type FROM "RunAttempts" WHERE id IN ({marks})', ids
            ).fetchall()
        found = {str(i): str(t) for i, t in rows}
    return {i: "local_process" if found.get(i) == "local_process" else "other" for i in ids}


def _snake(name: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name)


def write_metrics(
    client: Any, path: str, db: str, report: StartupReport, shadow: Mapping[str, Any] | None
) -> None:
    """The start-up ``report`` (``shadow``: its audit record) as one Prometheus text exposition
    (``prometheus_client.generate_latest``), written to ``path`` by
    ``reconciler._atomic.replace_file``: a temporary file in the same directory (a name the
    collector does not read), readable by the collector. Written before the report is printed
    (a lost stdout must not lose the metrics too); a failed write is one warning line, the
    temporary file removed and the old file untouched, and never changes the verdict
    (docs/decisions.md D-22)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge

    summary = report.primary.as_dict()
    labels = executors(db, summary)
    client.disable_created_metrics()  # a one-shot file: no `_created` series
    reg = CollectorRegistry()
    decided = Counter(
        "run_reconcile",
        "ADR-0001 §16: the candidates the last start-up's ADR-0068 pass decided, by executor "
        "and spec 04 outcome",
        ["executor", "result"],
        registry=reg,
    )
    for result in RESULTS:  # every result of the local executor, zeros included
        decided.labels("local_process", result)
    for c in summary.get("candidates", []):
        attempt = c.get("attempt_id")
        executor = labels.get(str(attempt), "other") if attempt else "none"
        decided.labels(executor, str(c.get("outcome"))).inc()
    _gauge(Gauge, reg, "qlfsm_startup_safe", "1 when the last start-up was SAFE to start",
           report.safe)  # fmt: skip
    _gauge(Gauge, reg, "qlfsm_startup_primary_scanned", "candidates the ADR-0068 pass observed",
           int(summary.get("scanned", 0)))  # fmt: skip
    _gauge(Gauge, reg, "qlfsm_startup_primary_truncated",
           "1 when more than 256 candidates were found (none was decided)",
           bool(summary.get("truncated")))  # fmt: skip
    took = Gauge(
        "qlfsm_startup_duration_seconds",
        "wall time of each pass of the last start-up, and of the whole (pass=total)",
        ["pass"],
        registry=reg,
    )
    for name in PASSES:
        if name in report.durations:
            took.labels(name).set(round(report.durations[name], 6))
    _gauge(Gauge, reg, "qlfsm_startup_last_run_timestamp_seconds",
           "when the last start-up ended (Unix time): a stale value means no start-up since",
           time.time())  # fmt: skip
    if shadow is not None:
        _shadow_metrics(Gauge, reg, shadow)
    data = bytes(client.generate_latest(reg))
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        replace_file(path, tmp, data, mode=0o644, flags=flags)
    except OSError as exc:
        say(
            f"qlfsm: warning: metrics file {shell_word(path)} not written "
            f"({exc.strerror or exc}); start-up is done and its verdict stands; the previous "
            "file, if any, is unchanged"
        )


def _gauge(gauge: Any, reg: Any, name: str, doc: str, value: float) -> None:
    gauge(name, doc, registry=reg).set(float(value))


def _shadow_metrics(gauge: Any, reg: Any, audit: Mapping[str, Any]) -> None:
    """ADR-0448's audit state and, when the pass ran, ADR-0449's metric batch (spec 05)."""
    state = gauge(
        "qlfsm_legacy_shadow_state", "the ADR-0448 audit state of the last start-up", ["state"],
        registry=reg,
    )  # fmt: skip
    for name in SHADOW_STATES:
        state.labels(name).set(1 if audit.get("state") == name else 0)
    batch = audit.get("metrics")
    if not isinstance(batch, Mapping):
        return
    dims = batch["dimensions"]
    keys = ["profile", "assessment", "stop_reason"]
    values = [str(dims["profile"]), str(dims["assessment"]), str(dims["stopReason"])]
    for key, value in batch["values"].items():
        gauge(
            f"qlfsm_legacy_shadow_{_snake(key)}",
            f"ADR-0449 metric batch value {key} of the last start-up's legacy-shadow pass",
            keys,
            registry=reg,
        ).labels(*values).set(int(value))
    per_origin = gauge(
        "qlfsm_legacy_shadow_origin_candidates",
        "ADR-0449 byOrigin: candidates of each reviewed origin, by outcome (and scanned)",
        ["origin", "outcome"],
        registry=reg,
    )
    for entry in batch["byOrigin"]:
        for key, value in entry.items():
            if key != "origin":
                per_origin.labels(str(entry["origin"]), _snake(key)).set(int(value))
