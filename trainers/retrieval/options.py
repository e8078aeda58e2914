"""The retrieval trainer's regularizers (--regularizer) and learning-rate schedules
(--lr_schedule), one record each: the choice's help and the code that acts on it, read by the
config's flags (`trainers.retrieval.config`), the model (`trainers.retrieval.model`) and the
figures' titles (`trainers.retrieval.plots`). Adding a regularizer or a schedule to the trainer
is one `Regularizer` or `Schedule` here (plus its library code).

The constructors import the library when called, so that reading the records (flags, help,
checks) imports no Keras.
"""

import dataclasses
import typing

from trainers.harness.flags import option


@dataclasses.dataclass(frozen=True)
class Regularizer:
    """One --regularizer value: a term added to the ranking loss on the embeddings.

    Attributes:
      name: the --regularizer value.
      help: what --regularizer's help says of it (empty: nothing).
      build: ``(config, draws) -> list`` of the `tf_svmax.losses` terms of a resolved config
        (empty: none); `draws` is the `SpreadOutDraws` layer that holds the spread-out loss's
        seed state on JAX and PyTorch, or None (`trainers.retrieval.model.spread_out_draws`).
      title: ``(recorded config dict) -> str``, what a figure's title says of it.
    """

    name: str
    help: str
    build: typing.Callable[[object, object], list]
    title: typing.Callable[[dict], str]


def _svmax(config, draws, **bounded):
    from tf_svmax import losses  # when the model is built: the flags' checks import no Keras

    return [losses.SVMaxLoss(lambda_=config.svmax_lambda, **bounded)]


def _spread_out(config, draws):
    from tf_svmax import losses

    seed = {} if draws is not None else {"seed": config.seed}  # the draws hold the seed
    return [losses.SpreadOutLoss(alpha=config.spread_out_alpha, draws=draws, **seed)]


REGULARIZERS = {
    regularizer.name: regularizer
    for regularizer in (
        Regularizer("none", "", lambda config, draws: [], lambda c: "no regularizer"),
        Regularizer("svmax", "bounded Eq. 4", _svmax, lambda c: f"SVMax λ = {c['svmax_lambda']:g}"),
        Regularizer(
            "svmax_unbounded",
            "-lambda s_mu",
            lambda config, draws: _svmax(config, draws, bounded=False),
            lambda c: f"unbounded SVMax λ = {c['svmax_lambda']:g}",
        ),
        Regularizer(
            "spread_out",
            "the paper's baseline (alpha = --spread_out_alpha)",
            _spread_out,
            lambda c: f"spread-out α = {c['spread_out_alpha']:g}",
        ),
    )
}


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One --lr_schedule value: the SGD learning rate as a function of the step.

    Attributes:
      name: the --lr_schedule value.
      help: what --lr_schedule's help says of it.
      rate: ``(config) ->`` the learning rate SGD takes for a resolved config: a number, or a
        `keras.optimizers.schedules.LearningRateSchedule` (a function of the step).
    """

    name: str
    help: str
    rate: typing.Callable[[object], object]


def _paper_rate(config):
    from tf_svmax.training import ConstantThenPolynomialDecay

    return ConstantThenPolynomialDecay(config.learning_rate, config.train_steps)


LR_SCHEDULES = {
    schedule.name: schedule
    for schedule in (
        Schedule(
            "paper",
            "--learning_rate for train_steps/2, then decayed polynomially to 1e-7 at "
            "train_steps (SVMax paper Sec. 4.1)",
            _paper_rate,
        ),
        Schedule(
            "constant",
            "--learning_rate throughout (the MNIST circle figure's original)",
            lambda config: config.learning_rate,
        ),
    )
}


def choice_option(records, default):
    """The config field that chooses one of `records` (a dict by name), `default` unless set:
    its flag's help is ``"name: help; name: help."`` of the records that have help."""
    return option(
        default,
        "; ".join(f"{r.name}: {r.help}" for r in records.values() if r.help) + ".",
        choices=tuple(records),
    )
