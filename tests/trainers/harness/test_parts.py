"""The trainers' configs are composed of shared parts: no field is declared twice."""

import collections
import dataclasses

import pytest
from absl import flags

from trainers.contrastive.config import ContrastiveConfig
from trainers.gan_mog.config import GanConfig
from trainers.harness import parts
from trainers.harness.flags import config_from_flags, define_flags
from trainers.pretraining.config import PretrainConfig
from trainers.retrieval.config import RetrievalConfig
from trainers.two_head.config import TwoHeadConfig

CONFIGS = (RetrievalConfig, TwoHeadConfig, ContrastiveConfig, GanConfig, PretrainConfig)


def declared(cls):
    """The field names a class's own body declares (not its bases')."""
    return set(vars(cls).get("__annotations__", {}))


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_no_config_re_declares_a_field_of_its_parts(config_class):
    counts = collections.Counter(
        name for cls in config_class.__mro__ for name in declared(cls) if cls is not object
    )
    assert {name for name, n in counts.items() if n > 1} == set()


def test_a_field_two_trainers_hold_comes_from_a_part():
    counts = collections.Counter(name for config in CONFIGS for name in declared(config))
    assert {name for name, n in counts.items() if n > 1} == set()


def test_a_part_takes_the_trainers_default_and_help_and_keeps_its_check():
    @dataclasses.dataclass(frozen=True)
    class Config(parts.learning_rate_part(0.5, "Its rate."), parts.run_part("runs/toy")):
        pass

    values = flags.FlagValues()
    define_flags(Config, flag_values=values)
    values(["program", "--train_steps=8"])
    assert values["learning_rate"].default == 0.5 and values["learning_rate"].help == "Its rate."
    assert values["output_dir"].default == "runs/toy"
    config = config_from_flags(Config, values)
    assert (config.learning_rate, config.train_steps, config.seed) == (0.5, 8, 0)
    assert [f.name for f in dataclasses.fields(Config)][0] == "output_dir"  # run part first
    with pytest.raises(ValueError, match="--learning_rate"):
        dataclasses.fields(Config)[-1].metadata["check"](-1.0, "--learning_rate")
