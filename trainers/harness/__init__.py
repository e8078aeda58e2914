"""What every trainer shares: flags derived from its config dataclass (`flags`), the run
folder (`run_dir`), resume (`checkpoints`), the training loop with its cadence, trace and NaN
guard (`loop`; `custom_fit` where Keras' `fit` cannot run), the `tf.distribute` strategy and
the multi-worker cluster (`distribute`), and figure writing (`plots`)."""
