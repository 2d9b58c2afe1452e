"""ADR-0068: the primary start-up pass, its writes and its summary."""
