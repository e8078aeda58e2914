"""The --dataset choices of the trainers, one `Dataset` record each: everything a trainer knows
about a dataset (its default length of training, where its images come from, what its help says
of it), read by the trainer's flags and checks (its ``config``) and by its input code. Each
trainer lists its own records (`records`), since the same name can mean another use of the same
data (the glyph set's open-set halves for retrieval, its training half's classes for the
two-head runs); adding a dataset to a trainer is one `Dataset` there.

The records hold their loaders as functions that import `tf_svmax.data` when called, so that
reading them (flags, help, checks) imports no Keras.
"""

import dataclasses
import typing


@dataclasses.dataclass(frozen=True)
class Dataset:
    """One --dataset value of a trainer.

    Attributes:
      name: the --dataset value.
      default_steps: the training steps when --train_steps is unset.
      help: what --dataset's help says of it (the trainer's config joins them; empty: nothing,
        e.g. a file dataset its trainer names in a shared sentence).
      load: for a dataset that comes with the package (in memory, no --data_dir), the function
        returning it in the form the trainer reads; None for one read from --data_dir.
    """

    name: str
    default_steps: int
    help: str = ""
    load: typing.Callable[[], object] | None = None

    @property
    def embedded(self):
        """Whether it comes with the package (no --data_dir)."""
        return self.load is not None


def records(*datasets):
    """``{name: Dataset}`` of a trainer's datasets, in the order given (its --dataset choices);
    raises ValueError for a name given twice."""
    table = {}
    for dataset in datasets:
        if dataset.name in table:
            raise ValueError(f"Dataset {dataset.name!r} is given twice.")
        table[dataset.name] = dataset
    return table


def embedded_names(table):
    """The names of the embedded datasets of `table` (`records`), in its order."""
    return [name for name, dataset in table.items() if dataset.embedded]


def file_names(table):
    """The names of the datasets of `table` read from --data_dir, in its order."""
    return [name for name, dataset in table.items() if not dataset.embedded]
