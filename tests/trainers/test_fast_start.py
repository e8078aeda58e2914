"""Every program under trainers/ answers ``--help`` and refuses a bad flag before importing
Keras, TensorFlow, JAX or PyTorch (issue 44: those take seconds to import; the answer should
not): the flags are defined from Keras-free modules (`tf_svmax._args`, loaded without the
package's ``__init__`` by `trainers.harness.lazy`, and the experiments' configs)
and checked before `quiet_start.import_tensorflow` runs.

Each case runs the program as ``python -m`` would (`runpy`, ``__main__``) in a fresh
interpreter, and reports its exit status and the heavy modules it imported."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.trainers.programs import PROGRAMS, ROOT
from trainers import quiet_start

HEAVY = ("keras", "tensorflow", "jax", "torch")

# Runs trainers.<argv[1]> with argv[2:] as ``python -m`` does and writes its exit status and
# the heavy modules then imported to the file named by argv[2].
DRIVER = textwrap.dedent(
    """
    import json, runpy, sys
    program, report, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.argv = [program, *flags]
    try:
        runpy.run_module("trainers." + program, run_name="__main__", alter_sys=True)
        code = None
    except SystemExit as done:
        code = done.code
    heavy = sorted(name for name in {heavy} if name in sys.modules)
    with open(report, "w") as file:
        json.dump({{"code": code, "heavy": heavy}}, file)
    """
).format(heavy=HEAVY)

# Runs the grid trainers.<argv[1]> as DRIVER does, stopped where TensorFlow is first imported,
# and writes the function importing it and the heavy modules imported by then to the file named
# by argv[2].
PLANNER = textwrap.dedent(
    """
    import json, runpy, sys
    from trainers import quiet_start
    program, report, flags = sys.argv[1], sys.argv[2], sys.argv[3:]

    class Stopped(BaseException):
        pass

    def stop():
        caller = sys._getframe(1)
        heavy = sorted(name for name in {heavy} if name in sys.modules)
        where = caller.f_globals["__name__"] + "." + caller.f_code.co_qualname
        with open(report, "w") as file:
            json.dump({{"caller": where, "heavy": heavy}}, file)
        raise Stopped

    quiet_start.import_tensorflow = stop
    sys.argv = [program, *flags]
    try:
        runpy.run_module("trainers." + program, run_name="__main__", alter_sys=True)
    except Stopped:
        pass
    """
).format(heavy=HEAVY)

# One refusal per program, of every kind: (flags, what stderr must name). A bad enum value and
# a non-number are absl's (at parsing); a value a validator refuses and a flag combination are
# the config's (`harness.flags.validate`, the trainer's `check`, the grid's options and the
# trainer flags it borrows). A grid's combinations are its own (`reproduce`) and its runs'
# (their trainer's `resolve`, through `grid.Runs`), refused while it plans, before TensorFlow.
REFUSED = {
    "train_retrieval": [
        (("--train_steps=0",), "Invalid value for argument `--train_steps`"),
        (("--weights=imagenet",), "--weights=imagenet: --backbone=small_cnn has no ImageNet"),
        (("--xbm_start_step=5",), "--xbm_start_step needs --xbm_size > 0"),
        (("--dataset=cub200",), "--dataset=cub200 needs --data_dir"),
        # The losses' declared capabilities (`tf_svmax.losses._declared`, read from the source).
        (("--batch_k=6",), "--loss=contrastive pairs the rows of each class as the original does"),
        (("--xbm_size=100",), "--xbm_size needs a loss that mines anchors against a reference"),
        # Issue 59: these passed the checks, then ended in a traceback (exit 1).
        (("--embedding_dim=1000000000000",), "--embedding_dim=1000000000000 (a Dense kernel"),
        (("--seed=4294967296",), "`--seed`. Expected an int in [0, 2**32 - 1 = 4294967295]"),
        (("--output_dir=runs/" + "n" * 300,), "names have at most 255 bytes"),
    ],
    "train_two_head": [
        (("--mode=bogus",), "flag --mode=bogus: value should be one of"),
        (("--mode=softmax", "--regularizer_lambda=1"), "--mode=softmax has no regularizer term"),
    ],
    "train_contrastive": [
        (("--temperature=warm",), "flag --temperature=warm"),
        (("--embedding_dim=10000000000",), "--embedding_dim=10000000000 (a Dense kernel"),
    ],
    "train_gan_mog": [
        (("--unroll_steps=3",), "--variant=unrolled only"),
        (("--hidden_units=1000000",), "--hidden_units=1000000 (a Dense kernel"),
        (("--seed=4294967296",), "`--seed`. Expected an int in [0, 2**32 - 1 = 4294967295]"),
    ],
    "pretrain_glyphs": [
        (
            ("--images_per_class=4", "--held_out_per_class=4"),
            "--held_out_per_class (4) must be below --images_per_class (4)",
        )
    ],
    "reproduce_table1": [
        (("--seeds=-1",), "Invalid value for argument `--seeds`"),
        (("--seeds=0,4294967296",), "`--seeds`. Expected an int in [0, 2**32 - 1"),
        (("--train_steps=0",), "Invalid value for argument `--train_steps`"),  # the trainer's
        (
            ("--train_steps=600", "--eval_every=7"),
            "--train_steps (600) must be a multiple of --eval_every (7)",
        ),
        (("--dataset=cub200",), "--dataset=cub200 needs --data_dir"),
    ],
    "reproduce_two_head": [
        (("--modes=bogus",), "Invalid value for argument `--modes`"),
        (("--backbone=resnet50",), "--dataset=glyphs has small grey images; --backbone=resnet50"),
        (("--weights=imagenet",), "--weights=imagenet: --backbone=small_cnn_bn has no ImageNet"),
    ],
    "reproduce_gan_mog": [
        (("--sweep_seeds=x",), "--sweep_seeds expects a comma-separated list"),
        (("--learning_rate=-1",), "Invalid value for argument `--learning_rate`"),
        (("--mixture_seed=3",), "--mixture_seed applies to --mixture=random only"),
        (
            ("--train_steps=10", "--eval_every=3"),
            "--train_steps (10) must be a multiple of --eval_every (3)",
        ),
    ],
    "reproduce_circle": [
        (("--frames=1",), "Invalid value for argument `--frames`"),
        (("--svmax_lambda=-1",), "Invalid value for argument `--svmax_lambda`"),
        (("--train_steps=5",), "--protocol=original counts --epochs, not --train_steps"),
        (("--dataset=glyphs",), "--protocol=original trains on digits_closed"),
        (("--protocol=ours", "--epochs=3"), "--epochs is for --protocol=original"),
        (("--protocol=ours", "--dataset=cub200"), "--dataset must be an embedded set"),
    ],
    "reproduce_lorac_xml": [
        (("--xml_lambda=2",), "Invalid value for argument `--xml_lambda`"),
        (("--xml_train_steps=9",), "--train_steps (9) must be a multiple of --eval_every (2)"),
        (
            ("--contrastive_train_steps=9",),
            "--train_steps (9) must be a multiple of --eval_every (2)",
        ),
    ],
    "glyphs_report": [(("--sample_instances=abc",), "flag --sample_instances=abc")],
    "glyphs_pretrain_report": [(("--sample_instances=abc",), "flag --sample_instances=abc")],
}


def _run(tmp_path, program, *flags, driver=DRIVER):
    """``(report, stdout, stderr)`` of the program run by `driver` with `flags` in `tmp_path`
    (its default --output_dir is checked for writing there), without a TF_CPP_MIN_LOG_LEVEL of
    the caller's."""
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-c", driver, program, str(report), *flags],
        cwd=tmp_path,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.exists(), done.stderr[-3000:]
    return json.loads(report.read_text()), done.stdout, done.stderr


def _tensorflow_lines(text):
    """The lines of `text` that TensorFlow's start-up (its C++ logging, absl's notice) writes."""
    return [
        line
        for line in text.splitlines()
        if quiet_start._LOG_LINE.match(line)
        or line.startswith(quiet_start._ABSL_NOTICE)
        or re.search(r"oneDNN|cpu_feature_guard", line)
    ]


def test_every_program_has_a_refusal_here():
    assert set(REFUSED) == set(PROGRAMS) and len(PROGRAMS) == 12


@pytest.mark.parametrize("flag", ["--help", "--helpfull"])
@pytest.mark.parametrize("program", PROGRAMS)
def test_help_imports_no_keras_tensorflow_jax_or_torch(tmp_path, program, flag):
    report, stdout, stderr = _run(tmp_path, program, flag)
    assert report == {"code": 0, "heavy": []}, stderr[-3000:]
    assert "--output_dir" in stdout or "--report" in stdout, stdout[:2000]
    assert not _tensorflow_lines(stdout + stderr), stderr[-3000:]


def test_the_one_entry_is_the_programs_own_command():
    """``python -m trainers retrieval`` is ``python -m trainers.train_retrieval``: the same
    help, byte for byte; a name that is no program is refused (exit 2) naming the programs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*argv):
        return subprocess.run(
            [sys.executable, "-m", *argv], cwd=ROOT, env=env, capture_output=True, text=True
        )

    own, one = (
        run("trainers.train_retrieval", "--helpfull"),
        run("trainers", "retrieval", "--helpfull"),
    )
    assert (one.returncode, one.stdout) == (0, own.stdout) and "--loss" in one.stdout
    wrong = run("trainers", "retrieve")
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert "expected a program, one of [" in wrong.stderr and "'retrieval'" in wrong.stderr
    assert "received 'retrieve'" in wrong.stderr


@pytest.mark.parametrize(
    "program, flags, message",
    [(program, flags, message) for program, cases in REFUSED.items() for flags, message in cases],
)
def test_a_refused_flag_imports_no_keras_tensorflow_jax_or_torch(tmp_path, program, flags, message):
    report, stdout, stderr = _run(tmp_path, program, *flags)
    assert report == {"code": 2, "heavy": []}, stderr[-3000:]
    assert message in stderr, stderr[-3000:]
    assert stdout == ""
    assert not _tensorflow_lines(stderr), stderr[-3000:]


RUNS = "trainers.harness.grid.Runs.__init__"  # imports TensorFlow once every run is accepted


@pytest.mark.parametrize(
    "program, flags, importer",
    [
        ("reproduce_table1", (), RUNS),
        ("reproduce_two_head", (), RUNS),
        ("reproduce_gan_mog", (), RUNS),
        ("reproduce_circle", ("--protocol=ours",), RUNS),
        # TensorFlow resizes the digits, whose number decides the steps of an epoch.
        ("reproduce_circle", ("--protocol=original",), "__main__.reproduce"),
        ("reproduce_lorac_xml", (), RUNS),
    ],
)
def test_a_grid_plans_its_runs_without_keras_tensorflow_jax_or_torch(
    tmp_path, program, flags, importer
):
    """The default grid is planned (its runs made and resolved by `grid.Runs`) before anything
    imports Keras, TensorFlow, JAX or PyTorch: a refusal comes before TensorFlow, which is
    first imported by `quiet_start`, so without its start-up lines."""
    report, stdout, stderr = _run(tmp_path, program, *flags, driver=PLANNER)
    assert report == {"caller": importer, "heavy": []}, stderr[-3000:]
    assert not list(tmp_path.rglob("config.json")), "a run started"  # stopped before any run


@pytest.mark.parametrize("program", ["train_gan_mog", "reproduce_gan_mog"])
def test_a_flagfile_that_is_not_utf8_is_refused_naming_it(tmp_path, program):
    """absl reads a --flagfile as UTF-8 and raised a bare UnicodeDecodeError (exit 1) on one
    that is not (issue 59)."""
    (tmp_path / "latin1.flags").write_bytes("--seed=1\n# caf\xe9\n".encode("latin-1"))
    report, stdout, stderr = _run(tmp_path, program, "--flagfile=latin1.flags")
    assert report == {"code": 2, "heavy": []}, stderr[-3000:]
    assert "Traceback" not in stderr and stdout == ""
    assert stderr.splitlines() == [
        f"{program}: refused: Invalid value for argument `--flagfile`. Expected a UTF-8 text "
        "file (byte b'\\xe9' at offset 14 is not). Received: --flagfile='latin1.flags'"
    ]


# DRIVER with `trainers` extra packages made uninstalled (argv[3] names them, comma-separated).
WITHOUT = "import sys\nfor name in sys.argv.pop(3).split(','):\n    sys.modules[name] = None\n"


@pytest.mark.parametrize("program", ["train_gan_mog", "reproduce_gan_mog", "glyphs_report"])
def test_without_the_trainers_extra_a_program_says_which_extra_before_any_work(tmp_path, program):
    """The trainers' packages are an extra, not the core's (issue 59): a program run without
    them refuses in one line naming it, where it would start the work."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT + DRIVER, program, str(report), "matplotlib,PIL"],
        cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(report.read_text()) == {"code": 2, "heavy": []}, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        f"{program}: refused: the trainers need matplotlib, pillow, which the `trainers` extra "
        'installs: pip install -e ".[trainers]" in the clone of the repository.'
    ]


# Loads the trainers' argument layer, then the library, and writes what each holds.
SAME_MODULE = textwrap.dedent(
    """
    import json, sys
    from trainers.harness.lazy import library_args
    before = sorted(name for name in {heavy} if name in sys.modules)
    import tf_svmax
    from tf_svmax import checks, models
    from tf_svmax.metrics import kmeans
    with open(sys.argv[1], "w") as file:
        json.dump({{
            "heavy_before": before,
            "file": library_args.__file__ == tf_svmax._args.__file__,
            "validator": checks.check_positive_int is library_args.check_positive_int,
            "error": models.WeightsFileError is library_args.WeightsFileError,
            "table": kmeans.INITS is library_args.KMEANS_INITS,
        }}, file)
    """
).format(heavy=HEAVY)


def test_the_trainers_argument_layer_is_the_library_module_loaded_without_keras(tmp_path):
    """`trainers.harness.lazy.library_args` is tf_svmax/_args.py loaded without the package's
    ``__init__`` (which imports Keras); once the library is imported it must be the module the
    library uses, not a copy: a copy's `WeightsFileError` would not catch the library's."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-c", SAME_MODULE, str(report)],
        cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.exists(), done.stderr[-3000:]
    assert json.loads(report.read_text()) == {
        "heavy_before": [],
        "file": True,
        "validator": True,
        "error": True,
        "table": True,
    }
