"""`--strategy`'s records: each distribution a trainer can run under, holding its constructor on
TensorFlow (a `tf.distribute` strategy: `trainers.harness.distribute`) and on JAX or PyTorch
(Keras' own distribution: `trainers.harness.keras_runtime`). `trainers.harness.runtime.
make_distribution` calls the one of this process's backend. Adding a strategy is one record.

Keras-free: the flag's choices are read before any backend loads; each constructor imports its
runtime when a run calls it.
"""

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One ``--strategy`` value.

    Attributes:
      name: The flag's value.
      tensorflow: ``(cpu_devices, cluster_timeout) -> distribution`` on TensorFlow (a
        `trainers.harness.distribute.TensorFlowDistribution`).
      keras: ``(cpu_devices, cluster_timeout) -> distribution`` on JAX and PyTorch (a
        `trainers.harness.keras_runtime.KerasDistribution`).
      Each raises ConfigError, in one sentence, for what its backend cannot run.
    """

    name: str
    tensorflow: Callable[[int, int], object]
    keras: Callable[[int, int], object]


def _distribute():
    from trainers.harness import distribute  # TensorFlow: imported when a run makes its own

    return distribute


def _keras_runtime():
    from trainers.harness import keras_runtime

    return keras_runtime


STRATEGIES = {
    s.name: s
    for s in (
        Strategy(
            "default",
            tensorflow=lambda cpu_devices, _: _distribute().default_strategy(cpu_devices),
            keras=lambda cpu_devices, _: _keras_runtime().one_device(cpu_devices),
        ),
        Strategy(
            "mirrored",
            tensorflow=lambda cpu_devices, _: _distribute().mirrored_strategy(cpu_devices),
            keras=lambda cpu_devices, _: _keras_runtime().data_parallel(cpu_devices),
        ),
        Strategy(
            "multi_worker",
            tensorflow=lambda cpu_devices, timeout: _distribute().multi_worker_strategy(
                cpu_devices, timeout
            ),
            keras=lambda cpu_devices, _: _keras_runtime().refuse_multi_worker(),
        ),
    )
}
