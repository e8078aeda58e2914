"""What every trainer shares: flags derived from its config dataclass (`flags`), the run
folder (`run_dir`), resume (`checkpoints`), the training loop with its cadence, trace and NaN
guard (`loop`), and figure writing (`plots`)."""
