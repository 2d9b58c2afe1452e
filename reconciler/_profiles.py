"""Deployment profiles: their names and rules in one place (spec 04 "Profiles", spec 05
"Profiles", spec 06). Standard library only, imported by both passes and the command line."""

from __future__ import annotations

PROFILE_ENV = "QL_DEPLOYMENT_PROFILE"
PROFILES: tuple[str, ...] = ("edge", "standalone", "cluster-control", "worker")
LOCAL_PROFILES: tuple[str, ...] = ("edge", "standalone")
# A cluster uses its own PostgreSQL claim/fencing model and never local PID evidence (spec 04).
CLUSTER_PROFILES = frozenset({"cluster-control", "worker"})
# ADR-0068 §2 step 6: the one-shot publication grace of each local profile, in milliseconds.
GRACE_MS: dict[str, int] = {"edge": 50, "standalone": 100}


class ProfileError(ValueError):
    """Not a profile, or a cluster profile where a local pass was asked for. The message says
    what to choose and shows the value escaped (D-14), so a stray space or control character is
    visible and nothing in it acts on a terminal."""


def resolve_profile(value: str | None) -> str:
    """Exact match, no trimming: `" edge"` is a configuration error, not `edge`; unset or empty
    means `standalone` (spec 05)."""
    if value is None or value == "":
        return "standalone"
    if value not in PROFILES:
        from reconciler._escape import clean

        # D-23: the value is echoed, escaped (a trailing space shows), so the typo can be seen.
        raise ProfileError(
            f"unknown deployment profile {clean(repr(value))}; choose one of "
            f"{', '.join(PROFILES)} (exactly, no spaces)"
        )
    return value


def local_profile(profile: str) -> str:
    """``profile`` when the local (ADR-0068) pass may run under it; else ProfileError."""
    if profile in CLUSTER_PROFILES:
        raise ProfileError(
            f"profile {profile!r} refuses the local reconciler (a cluster uses its PostgreSQL "
            "claim/fencing model); run it with --profile edge or --profile standalone"
        )
    if profile not in LOCAL_PROFILES:
        raise ProfileError(f"unknown profile; choose one of {', '.join(PROFILES)}")
    return profile


def grace_seconds(profile: str) -> float:
    """The publication grace of a local profile, in seconds (ProfileError for any other)."""
    return GRACE_MS[local_profile(profile)] / 1000.0
