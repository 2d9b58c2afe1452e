"""ADR-0448: the legacy-shadow pass, its entry (switches, profile, fail-open, the audit record)
and the ADR-0449 difference report."""
