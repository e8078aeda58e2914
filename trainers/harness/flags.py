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

from trainers.harness.lazy import library_args  # the library's validators and tables, no Keras

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
    resumes the run (`trainers.harness.run_dir.identity`)."""
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
positive_int = library_args.check_positive_int
non_negative_int = library_args.check_non_negative_int
non_negative_number = library_args.check_non_negative_number
positive_number = library_args.check_positive_number
rate = library_args.check_rate
fraction = library_args.check_fraction

# The largest seed every backend takes: NumPy's legacy seeding (`keras.utils.set_random_seed`)
# and Keras' JAX seed state are uint32.
SEED_MAX = 2**32 - 1


def random_seed(value, name):
    """An int in [0, 2**32 - 1]: a seed every backend's random state can hold."""
    if library_args.check_non_negative_int(value, name) > SEED_MAX:
        raise ValueError(
            library_args.invalid(name, f"an int in [0, 2**32 - 1 = {SEED_MAX}]", value)
        )
    return int(value)


def _too_long_name(path, existing):
    """The first part of `path` below `existing` whose name is longer than the file system
    there allows (NAME_MAX, in bytes), or None."""
    limit = os.pathconf(existing, "PC_NAME_MAX")
    for part in os.path.relpath(path, existing).split(os.sep):
        if len(os.fsencode(part)) > limit:
            return part, limit
    return None


def writable_folder(value, name):
    """A folder path this process can write: an existing folder, or one it can create (the
    nearest existing ancestor is a folder where a trial folder can be made and removed; that
    catches /dev/null, a file, /proc and read-only places before any work; and no folder name
    to create is longer than the file system allows)."""
    if not isinstance(value, str) or not value:
        raise ValueError(library_args.invalid(name, "a folder path", value))
    path = existing = os.path.abspath(value)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    too_long = os.path.isdir(existing) and _too_long_name(path, existing)
    if too_long:
        part, limit = too_long
        raise ValueError(
            library_args.invalid(
                name,
                f"a folder path whose names have at most {limit} bytes (the file system's limit; "
                f"one has {len(os.fsencode(part))})",
                value,
            )
        )
    if not os.path.isdir(existing):
        raise ValueError(
            library_args.invalid(name, f"a folder path ({existing} is a file, not a folder)", value)
        )
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".write-check-").cleanup()
    except OSError as error:
        raise ValueError(
            library_args.invalid(
                name, f"a folder this process can write ({existing}: {error.strerror})", value
            )
        ) from None
    return value


def number_at_least(low, *, integer=False):
    """A validator of finite floats >= `low` (with `integer`, of ints >= `low`)."""
    kind = (
        library_args.check_non_negative_int if integer else library_args.check_non_negative_number
    )
    expected = f"an int >= {low}" if integer else f"a float >= {low:g}"

    def check(value, name):
        try:
            number = kind(value, name)
        except ValueError:
            number = None  # not a number, or below 0: say the bound this value must meet
        if number is None or number < low:
            raise ValueError(library_args.invalid(name, expected, value)) from None
        return number

    return check


def open_fraction(value, name):
    """A float in (0, 1)."""
    if not 0 < library_args.check_non_negative_number(value, name) < 1:
        raise ValueError(library_args.invalid(name, "a float in (0, 1)", value))
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
            raise FlagValueError(library_args.invalid(name, "a value", None))
        choices, check = meta.get("choices"), meta.get("check")
        items = value if _base_type(field.type) is tuple else (value,)
        try:
            if not items and (choices is not None or check is not None):
                raise ValueError(library_args.invalid(name, "at least one value", value))
            for item in items:
                if choices is not None and item not in choices:
                    raise ValueError(library_args.invalid(name, f"one of {list(choices)}", item))
                if check is not None:
                    check(item, name)
        except ValueError as error:
            raise FlagValueError(str(error)) from None


HELP_FLAGS = ("-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def flagfiles(argv):
    """The files that ``--flagfile=PATH`` and ``--flagfile PATH`` in `argv` name."""
    names = []
    for i, arg in enumerate(argv):
        for prefix in ("--flagfile=", "-flagfile="):
            if arg.startswith(prefix):
                names.append(arg[len(prefix) :])
        if arg in ("--flagfile", "-flagfile") and i + 1 < len(argv):
            names.append(argv[i + 1])
    return names


def flagfile_refusal(argv, error):
    """The refusal of a --flagfile absl could not decode (it reads them as UTF-8, and raises
    `error`, a UnicodeDecodeError naming no file): names the first of `argv`'s that is not
    UTF-8 (or, for one named inside another, says so)."""
    reason = f"byte {error.object[error.start : error.start + 1]!r} at offset {error.start}"
    for name in flagfiles(argv):
        try:
            with open(name, "rb") as file:
                file.read().decode("utf-8")
        except UnicodeDecodeError as bad:
            reason = f"byte {bad.object[bad.start : bad.start + 1]!r} at offset {bad.start}"
            return library_args.invalid("--flagfile", f"a UTF-8 text file ({reason} is not)", name)
        except OSError:
            continue  # absl reports a missing file itself
    return library_args.invalid(
        "--flagfile", f"UTF-8 text files ({reason} is not)", flagfiles(argv)
    )


def run(main, argv=None):
    """`absl.app.run(main)` with the trainers' exit codes where absl exits before `main`: 0
    after printing help, 2 for a flag it cannot parse or a --flagfile that is not UTF-8 text
    (absl exits 1 for the first two and raises for the last, and the trainers define exit
    status 1 as "diverged")."""
    from absl import app

    argv = sys.argv if argv is None else argv
    ran = []

    def main_ran(args):
        ran.append(True)
        return main(args)

    try:
        app.run(main_ran, argv=argv)
    except UnicodeDecodeError as error:
        if ran:
            raise
        program = os.path.splitext(os.path.basename(argv[0]))[0]
        print(f"{program}: refused: {flagfile_refusal(argv, error)}", file=sys.stderr)
        raise SystemExit(2) from None
    except SystemExit as done:
        if done.code == 1 and not ran:
            asked = any(arg.split("=")[0] in HELP_FLAGS for arg in argv[1:])
            raise SystemExit(0 if asked else 2) from None
        raise
