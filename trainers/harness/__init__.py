"""What every trainer shares: the parts of its config (`parts`: the run fields and others
several trainers hold, each declared once; `config`: `ImageDataConfig`, cadence and
image-size rules), flags derived from that dataclass (`flags`)
and the entry point with its exit codes (`cli`), the run folder (`run_dir`), the training loop
with its cadence, trace and NaN guard (`loop`), the runtime it distributes and reads input
through, whatever the Keras backend (`runtime`: an image run's start, the P x K batches; on
TensorFlow the `tf.distribute` strategies and the multi-worker cluster (`distribute`;
`custom_fit` where Keras' `fit` cannot run); on JAX and PyTorch Keras' own (`keras_runtime`)),
its checkpoints in Keras' format on every backend with "newest readable" resume
(`checkpoints`), the image experiments' image-file loaders (`image_data`), the trainers' --dataset
records (`datasets`), figure and table writing (`plots`, `tables`), the runner of the
`reproduce_*` programs' grids of runs (`grid`), and the experiment packages' import of their
training code when first used and the library's argument layer without Keras (`lazy`: flags
are checked before Keras loads)."""
