"""absl flags derived from a trainer's frozen config dataclass: one definition of every option.

Each field is declared once with `option(default, help, choices=...)`; `define_flags` turns the
fields into flags of the matching kind (enum for choices, bool, integer, float, list for tuples,
string otherwise) and `config_from_flags` builds the dataclass back from the parsed values.

    @dataclasses.dataclass(frozen=True)
    class Config:
        output_dir: str = option(REQUIRED, "Where results go.", flag_default="runs/x")
        steps: int = option(100, "Training steps.")

    define_flags(Config)                       # --output_dir, --steps (in main's module)
    config = config_from_flags(Config)         # after absl parsed argv
"""

import dataclasses
import os
import sys
import tempfile
import types
import typing

from absl import flags

import tf_svmax_args as checks  # the library's validators (`tf_svmax.checks`'), without Keras

REQUIRED = dataclasses.MISSING


class FlagValueError(ValueError):
    """A flag value that parses but does not convert to its config field's type."""


def option(
    default,
    help,  # noqa: A002
    *,
    choices=None,
    check=None,
    flag_default=REQUIRED,
    identity=True,
):
    """A config field with its flag help (and choices for an enum flag). `check` is the
    validator of the value's kind (``check(value, "--name")`` returns it or raises ValueError;
    for a tuple field, of each item); `validate` applies it and `choices` to every field.
    `flag_default` gives the flag a default where the dataclass field has none (a library
    caller must pass it, a command-line user need not). `identity=False` marks a field that
    does not change what a run computes (where it writes, how much it prints): changing it
    resumes the run."""
    metadata = {
        "help": help,
        "choices": choices,
        "check": check,
        "flag_default": flag_default,
        "identity": identity,
    }
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _base_type(annotation):
    """``int`` for ``int | None`` and ``Optional[int]``; ``tuple`` for ``tuple[int, ...]``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) or annotation


def _item_type(annotation):
    args = typing.get_args(annotation)
    return args[0] if args else str


def define_flags(
    config_class, *, only=None, defaults=None, help_overrides=None, flag_values=flags.FLAGS
):
    """Defines one flag per field of `config_class` (or of the names in `only`); `defaults`
    and `help_overrides` (by field name) change a flag's default and help for one program."""
    defaults, help_overrides = defaults or {}, help_overrides or {}
    for field in dataclasses.fields(config_class):
        if only is not None and field.name not in only or "help" not in field.metadata:
            continue
        meta = field.metadata
        default = field.default if field.default is not REQUIRED else meta["flag_default"]
        default = defaults.get(field.name, None if default is REQUIRED else default)
        help_text = help_overrides.get(field.name, meta["help"])
        kind = _base_type(field.type)
        kwargs = dict(flag_values=flag_values)
        if meta["choices"] is not None and kind is str:
            flags.DEFINE_enum(field.name, default, list(meta["choices"]), help_text, **kwargs)
        elif kind is bool:
            flags.DEFINE_bool(field.name, default, help_text, **kwargs)
        elif kind is int:
            flags.DEFINE_integer(field.name, default, help_text, **kwargs)
        elif kind is float:
            flags.DEFINE_float(field.name, default, help_text, **kwargs)
        elif kind is tuple:
            values = None if default is None else [str(v) for v in default]
            flags.DEFINE_list(field.name, values, help_text, **kwargs)
        else:
            flags.DEFINE_string(field.name, default, help_text, **kwargs)


def config_from_flags(config_class, flag_values=flags.FLAGS, **overrides):
    """`config_class` from the parsed flags of its fields (fields without a flag keep their
    defaults); `overrides` win. A list flag's items are converted to the tuple's item type;
    one that does not convert raises FlagValueError naming the flag."""
    kwargs = {}
    for field in dataclasses.fields(config_class):
        if field.name not in flag_values or field.name in overrides:
            continue
        value = flag_values[field.name].value
        if _base_type(field.type) is tuple and value is not None:
            item = _item_type(field.type)
            try:
                value = tuple(item(v) for v in value)
            except ValueError:
                raise FlagValueError(
                    f"--{field.name} expects a comma-separated list of {item.__name__}; "
                    f"received {','.join(value)!r}."
                ) from None
        kwargs[field.name] = value
    return config_class(**kwargs, **overrides)


# Validators for `option(check=...)`, one per kind of value, on the library's validators.
positive_int = checks.check_positive_int
non_negative_int = checks.check_non_negative_int
non_negative_number = checks.check_non_negative_number
positive_number = checks.check_positive_number
rate = checks.check_rate
fraction = checks.check_fraction


def writable_folder(value, name):
    """A folder path this process can write: an existing folder, or one it can create (the
    nearest existing ancestor is a folder where a trial folder can be made and removed; that
    catches /dev/null, a file, /proc and read-only places before any work)."""
    if not isinstance(value, str) or not value:
        raise ValueError(checks.invalid(name, "a folder path", value))
    existing = os.path.abspath(value)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(
            checks.invalid(name, f"a folder path ({existing} is a file, not a folder)", value)
        )
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".write-check-").cleanup()
    except OSError as error:
        raise ValueError(
            checks.invalid(
                name, f"a folder this process can write ({existing}: {error.strerror})", value
            )
        ) from None
    return value


def number_at_least(low, *, integer=False):
    """A validator of finite floats >= `low` (with `integer`, of ints >= `low`)."""
    kind = checks.check_non_negative_int if integer else checks.check_non_negative_number
    expected = f"an int >= {low}" if integer else f"a float >= {low:g}"

    def check(value, name):
        try:
            number = kind(value, name)
        except ValueError:
            number = None  # not a number, or below 0: say the bound this value must meet
        if number is None or number < low:
            raise ValueError(checks.invalid(name, expected, value)) from None
        return number

    return check


def open_fraction(value, name):
    """A float in (0, 1)."""
    if not 0 < checks.check_non_negative_number(value, name) < 1:
        raise ValueError(checks.invalid(name, "a float in (0, 1)", value))
    return float(value)


def validate(config, only=None):
    """Checks every field of the config dataclass instance (or those named in `only`) against
    its `option` metadata: the value is one of `choices` and passes `check` (each item of a
    tuple; a tuple with either must not be empty), and is None only where the field's default
    is None. Raises FlagValueError naming --field."""
    for field in dataclasses.fields(config):
        if only is not None and field.name not in only:
            continue
        meta, value, name = field.metadata, getattr(config, field.name), f"--{field.name}"
        if value is None:
            if field.default is None:
                continue
            raise FlagValueError(checks.invalid(name, "a value", None))
        choices, check = meta.get("choices"), meta.get("check")
        items = value if _base_type(field.type) is tuple else (value,)
        try:
            if not items and (choices is not None or check is not None):
                raise ValueError(checks.invalid(name, "at least one value", value))
            for item in items:
                if choices is not None and item not in choices:
                    raise ValueError(checks.invalid(name, f"one of {list(choices)}", item))
                if check is not None:
                    check(item, name)
        except ValueError as error:
            raise FlagValueError(str(error)) from None


def identity(config_dict, config_class):
    """The entries of `config_dict` that define a run (fields not marked ``identity=False``)."""
    ignored = {
        f.name for f in dataclasses.fields(config_class) if f.metadata.get("identity") is False
    }
    return {k: v for k, v in config_dict.items() if k not in ignored}


HELP_FLAGS = ("-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def run(main, argv=None):
    """`absl.app.run(main)` with the trainers' exit codes where absl exits before `main`: 0
    after printing help, 2 for a flag it cannot parse (absl exits 1 for both, and the trainers
    define exit status 1 as "diverged")."""
    from absl import app

    argv = sys.argv if argv is None else argv
    ran = []

    def main_ran(args):
        ran.append(True)
        return main(args)

    try:
        app.run(main_ran, argv=argv)
    except SystemExit as done:
        if done.code == 1 and not ran:
            asked = any(arg.split("=")[0] in HELP_FLAGS for arg in argv[1:])
            raise SystemExit(0 if asked else 2) from None
        raise
