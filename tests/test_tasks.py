"""tasks.py, the README's two commands: argument handling before any setup."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tasks(*args, **env):
    return subprocess.run(
        [sys.executable, str(ROOT / "tasks.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_unknown_or_missing_verb_prints_usage_and_exits_2():
    for args in ((), ("deploy",)):
        done = _tasks(*args)
        assert done.returncode == 2 and "usage: python3 tasks.py {run,test}" in done.stderr


def test_bad_tensorflow_choice_is_refused_before_setup():
    done = _tasks("run", TF_SVMAX_TENSORFLOW="tpu")
    assert done.returncode != 0 and "TF_SVMAX_TENSORFLOW must be 'cpu' or 'gpu'" in done.stderr


def _tasks_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_runs_one_pytest_worker_per_core_unless_told():
    workers = _tasks_module().pytest_workers
    assert workers([], cores=2) == ["-n", "2"]
    assert workers(["-x"], cores=16) == ["-n", "4"]  # each worker's TensorFlow uses every core
    assert workers([], cores=1) == []
    for chosen in (["-n", "0"], ["-n0"], ["--numprocesses=3"], ["-p", "no:xdist"]):
        assert workers(["-x", *chosen], cores=2) == [], chosen
    assert workers(["--noconftest"], cores=2) == ["-n", "2"]


def test_setup_is_redone_when_pyproject_or_the_extras_change():
    import hashlib

    tasks = _tasks_module()
    stamp = tasks.setup_stamp
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    backends = " ".join(tasks.BACKEND_PACKAGES)
    assert stamp("cpu,testtools") == f"cpu,testtools {backends} {digest}"
    assert stamp("gpu,testtools") != stamp("cpu,testtools")


class _Recorder:
    """Stands in for subprocess.run: records the commands, and `creates` the browser file when
    the install command runs (as apt-get would), so nothing on the real system is touched."""

    def __init__(self, browser=None, fail_at=None):
        self.commands, self.browser, self.fail_at = [], browser, fail_at

    def __call__(self, command, **kwargs):
        self.commands.append(command)
        failed = self.fail_at is not None and len(self.commands) - 1 == self.fail_at
        if not failed and "install" in command and self.browser is not None:
            self.browser.write_text("")
        return subprocess.CompletedProcess(command, 1 if failed else 0, "", "")


def test_a_present_browser_installs_nothing(tmp_path, capsys):
    browser = tmp_path / "chromium"
    browser.write_text("")
    run = _Recorder()
    assert _tasks_module().ensure_chromium(browser, root=False, sudo=False, run=run) is None
    assert run.commands == [] and capsys.readouterr().out == ""


def test_a_missing_browser_is_installed_with_apt_as_root_or_with_sudo(tmp_path, capsys):
    ensure = _tasks_module().ensure_chromium
    apt = [
        ["apt-get", "update", "-qq"],
        ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "chromium"],
    ]
    for root, sudo, prefix in ((True, False, []), (False, True, ["sudo", "-n"])):
        browser = tmp_path / f"chromium-{root}"
        run = _Recorder(browser)
        assert ensure(browser, root=root, sudo=sudo, run=run) is None
        assert run.commands == [prefix + c for c in apt]
        lines = capsys.readouterr().out.splitlines()
        assert lines == [
            f"[tasks] installing Debian's chromium (the docs' browser test needs {browser})"
        ]


def test_without_rights_or_when_apt_fails_it_says_what_to_run_and_installs_nothing(tmp_path):
    ensure = _tasks_module().ensure_chromium
    browser = tmp_path / "chromium"
    run = _Recorder(browser)
    message = ensure(browser, root=False, sudo=False, run=run)
    assert run.commands == [] and not browser.exists()
    assert "chromium" in message and "sudo apt-get install -y chromium" in message
    failing = _Recorder(browser, fail_at=1)
    message = ensure(browser, root=True, sudo=False, run=failing)
    assert len(failing.commands) == 2 and "failed at `env DEBIAN_FRONTEND" in message


def test_the_test_verb_stops_before_setup_and_pytest_when_chromium_cannot_be_had(
    tmp_path, monkeypatch, capsys
):
    """The whole command: no browser, no rights -> the sentence on stderr, exit 1, and neither
    the virtual environment's setup nor lint nor pytest ran."""
    tasks = _tasks_module()
    called = []
    monkeypatch.setattr(tasks, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setattr(tasks, "passwordless_sudo", lambda: False)
    monkeypatch.setattr(tasks, "setup", lambda: called.append("setup"))
    monkeypatch.setattr(tasks, "call", lambda command: called.append(command) or 0)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert tasks.main(["tasks.py", "test", "-x"]) == 1 and called == []
    assert "sudo apt-get install -y chromium" in capsys.readouterr().err


def test_a_backend_run_without_tests_fails_unless_the_selection_chose_none(capsys):
    status = _tasks_module().backend_status
    assert status("jax", 0, chosen=False) == 0 and status("jax", 1, chosen=True) == 1
    assert status("torch", 5, chosen=False) == 1  # the whole suite: no core test is a failure
    assert "KERAS_BACKEND=torch collected no tests" in capsys.readouterr().err
    assert status("torch", 5, chosen=True) == 0  # `tasks.py test tests/test_tasks.py`


def test_each_backend_run_is_its_own_process_and_finishing_prints_its_log(capsys):
    """Each other backend gets its own pytest process (KERAS_BACKEND set, the selection passed
    on); finishing prints each log with its time and returns the first failure."""
    tasks = _tasks_module()
    started = []

    class Process:
        def __init__(self, command, env, stdout, stderr):
            started.append((command, env["KERAS_BACKEND"]))
            stdout.write(f"log of {env['KERAS_BACKEND']}")
            self.code = 1 if env["KERAS_BACKEND"] == "torch" else 0

        def wait(self):
            return self.code

    original = tasks.subprocess.Popen
    tasks.subprocess.Popen = Process
    try:
        runs = tasks.start_backend_runs(["-k", "svmax"])
    finally:
        tasks.subprocess.Popen = original
    assert [backend for _, backend in started] == list(tasks.OTHER_BACKENDS)
    for command, backend in started:
        workers = tasks.pytest_workers([]) if backend in tasks.SPLIT_BACKENDS else []
        assert command[-3 - len(workers) :] == ["tests", *workers, "-k", "svmax"]
    assert tasks.finish_backend_runs(runs, ["-k", "svmax"]) == (1 if "torch" in runs else 0)
    out = capsys.readouterr().out
    assert all(f"KERAS_BACKEND={b} (ended" in out and f"log of {b}" in out for b in runs)


def test_a_venv_without_pip_is_made_anew_not_a_traceback_at_every_rerun(tmp_path, capsys):
    """Issue 59: a .venv left with a python but no pip (its setup stopped) made every rerun end
    in pip's traceback; setup now sees it and creates it anew."""
    import venv

    tasks = _tasks_module()
    folder = tmp_path / ".venv"
    venv.create(folder, with_pip=False, symlinks=True)  # what a stopped setup leaves
    assert (folder / "bin" / "python").exists() and not tasks.has_pip(folder / "bin" / "python")
    created = []
    problem = tasks.make_venv(folder, create=lambda *a, **k: created.append((a, k)))
    assert problem is None and created == [((folder,), {"with_pip": True, "clear": True})]
    assert "anew (the one there has no pip" in capsys.readouterr().out
    assert tasks.make_venv(Path(sys.prefix), create=None) is None  # one with pip is kept


def test_a_checkout_this_user_cannot_write_is_said_so_not_python3_venv(tmp_path):
    import errno

    tasks = _tasks_module()
    folder = tmp_path / ".venv"

    def refused(path, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    problem = tasks.make_venv(folder, create=refused)
    assert problem.startswith(f"tasks.py: this user cannot write {folder} (Permission denied)")
    assert "clone this user can write" in problem and "python3-venv" not in problem

    def no_ensurepip(path, **kwargs):
        raise subprocess.CalledProcessError(1, ["python", "-m", "ensurepip"])

    assert "sudo apt install python3-venv" in tasks.make_venv(folder, create=no_ensurepip)


def test_a_failing_pip_step_is_one_sentence_that_names_it_and_how_to_start_anew():
    tasks = _tasks_module()
    ran = []

    def run(command, cwd):
        ran.append(command)
        return subprocess.CompletedProcess(command, 1 if "torch" in command else 0)

    problem = tasks.install([["python", "-m", "pip", "jax"], ["python", "-m", "pip", "torch"]], run)
    assert len(ran) == 2
    assert problem.startswith("tasks.py: `python -m pip torch` failed (exit status 1")
    assert f"delete it (rm -rf {tasks.VENV})" in problem
    assert tasks.install([["python", "-m", "pip", "jax"]], run) is None
