"""The documentation site: a strict mkdocs build (broken links and missing references fail),
API pages that show every public name, and the built site rendered in headless Chromium."""

import fcntl
import functools
import http.server
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = (
    "checks",
    "data",
    "losses",
    "metrics",
    "models",
    "ops",
    "records",
    "regularizers",
    "training",
)
CHROMIUM = "/usr/bin/chromium"
INSTALL_CHROMIUM = (
    "headless Chromium is needed at /usr/bin/chromium: "
    "sudo apt-get update && sudo apt-get install -y chromium (Debian/Ubuntu)"
)
WINDOW = (1280, 900)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """Builds the site once per test run, shared by pytest-xdist's workers (a lock file in the
    run's common temporary folder; the first worker builds, the others read its result)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A worker's base folder is <run>/popen-gw<n>: the run's is its parent. Without xdist
        # the parent is shared by every pytest run (pytest-of-<user>), whose record would be
        # another run's build.
        shared = shared.parent
    with open(shared / "docs_site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = shared / "docs_site.json"
        if not record.exists():
            site_dir = shared / "docs_site"
            # The API pages come from griffe's static analysis: a build that imported TensorFlow
            # (slow, and a failure where it is missing) would meet this stand-in and fail.
            no_tensorflow = shared / "docs_site_no_tensorflow" / "tensorflow"
            no_tensorflow.mkdir(parents=True, exist_ok=True)
            (no_tensorflow / "__init__.py").write_text(
                'raise ImportError("the documentation build must not import TensorFlow")\n'
            )
            path = os.pathsep.join([str(no_tensorflow.parent), os.environ.get("PYTHONPATH", "")])
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": path},
            )
            record.write_text(
                json.dumps(
                    {
                        "returncode": done.returncode,
                        "log": done.stderr[-6000:],
                        "seconds": time.perf_counter() - start,
                        "site_dir": str(site_dir),
                    }
                )
            )
        return json.loads(record.read_text())


def built(site):
    assert site["returncode"] == 0, f"mkdocs build --strict failed:\n{site['log']}"
    return Path(site["site_dir"])


def test_the_site_builds_in_strict_mode(site):
    site_dir = built(site)
    assert (site_dir / "index.html").exists()
    # Static analysis (griffe) reads the API: the build does not import TensorFlow (the fixture
    # hides it behind a package that raises ImportError). How long it took is the machine's.


def public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name in dir(module)
            if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)
        ]
    return sorted(names)


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_is_on_its_api_page(site, name):
    module = importlib.import_module(f"tf_svmax.{name}")
    page = (built(site) / "api" / name / "index.html").read_text(encoding="utf-8")
    missing = [n for n in public_names(module) if f'id="tf_svmax.{name}.{n}"' not in page]
    assert not missing, f"not on docs/api/{name}.md's page: {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_api_pages_have_no_stray_headings(site, name):
    """Every heading of an API page is one of mkdocstrings' own (class "doc doc-heading"): a
    docstring line that Markdown reads as a heading (one starting with "#", e.g. a formula
    wrapped before "#(terms > 0)") would break the page's outline and table of contents."""
    page = (built(site) / "api" / name / "index.html").read_text(encoding="utf-8")
    headings = re.findall(r"<h([1-6])([^>]*)>(.*?)</h\1>", page, flags=re.S)
    assert headings  # the page has mkdocstrings' headings to check
    stray = [
        re.sub(r"<[^>]+>", "", text).strip()[:80]
        for _, attributes, text in headings
        if "doc-heading" not in attributes
    ]
    assert not stray, f"docs/api/{name}.md: docstring lines rendered as headings: {stray}"


def test_every_module_of_the_package_has_an_api_page(site):
    import tf_svmax

    modules = sorted(n for n in tf_svmax.__all__ if not n.startswith("_"))
    assert modules == sorted(MODULES)
    index = (built(site) / "api" / "index.html").read_text(encoding="utf-8")
    assert "__version__" in index
    for name in modules:
        assert (ROOT / "docs" / "api" / f"{name}.md").read_text().strip() == f"::: tf_svmax.{name}"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    statuses = []

    def log_message(self, format, *args):
        pass

    def log_request(self, code="-", size="-"):
        self.statuses.append((self.path, int(code) if str(code).isdigit() else code))


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_Quiet, directory=str(built(site)))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def chromium(url, screenshot):
    """Opens `url` in a fresh headless Chromium and writes a screenshot; returns its log."""
    if not os.path.exists(CHROMIUM):  # `tasks.py test` installs it before any test
        pytest.skip(INSTALL_CHROMIUM)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        done = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                "--virtual-time-budget=5000",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                f"--screenshot={screenshot}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def console_messages(log):
    """The page's console output in Chromium's log (`INFO:CONSOLE:<line>] "message", source: ...`
    for console.log, warnings and uncaught errors alike: the levels are not told apart, so the
    site must log nothing at all)."""
    return [line for line in log.splitlines() if re.search(r":CONSOLE[:(]|Uncaught", line)]


def check_screenshot(path):
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == WINDOW
        colors = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colors is not None and len(colors) > 50, "a blank page"


def test_the_console_check_sees_an_error(tmp_path):
    # The check below would pass on a browser that logs nothing: a page with an error must fail.
    page = tmp_path / "error.html"
    page.write_text("<html><body>x<script>undefined_function();</script></body></html>")
    log = chromium(page.as_uri(), tmp_path / "error.png")
    assert any("undefined_function" in line for line in console_messages(log)), log[-3000:]


@pytest.mark.parametrize("path", ["", "api/losses/"])
def test_the_page_renders_in_headless_chromium(served, path, tmp_path):
    _Quiet.statuses.clear()
    screenshot = tmp_path / "page.png"
    log = chromium(f"{served}/{path}", screenshot)
    assert not console_messages(log), "\n".join(console_messages(log))
    check_screenshot(screenshot)
    failed = [(p, code) for p, code in _Quiet.statuses if not (200 <= code < 400)]
    assert not failed, f"requests that failed: {failed}"
    assert (f"/{path}", 200) in _Quiet.statuses
    if os.environ.get("TF_SVMAX_SCREENSHOTS"):  # a folder to keep the screenshots in, to look
        target = Path(os.environ["TF_SVMAX_SCREENSHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, target / f"{path.strip('/').replace('/', '_') or 'index'}.png")
