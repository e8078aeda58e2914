"""What every trainer shares: flags derived from its config dataclass (more to come: run
directory, resume, cadence, plots)."""
