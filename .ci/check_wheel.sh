#!/usr/bin/env bash
# The package as a user gets it: builds the sdist and the wheel (the wheel from the sdist, so a
# file missing from the sdist fails here), checks them with twine and by their contents, installs
# the wheel with its cpu extra into a fresh virtual environment and runs .ci/wheel_smoke.py there
# (import, one fit step with a tf_svmax loss, .keras save/load, equal predictions), then with its
# jax extra into another, without TensorFlow, and runs .ci/backend_smoke.py on KERAS_BACKEND=jax.
# Neither takes the trainers extra: the core must work without it.
# Everything happens in a temporary directory outside the checkout, which is left untouched.
#
#   .ci/check_wheel.sh          # by hand, from anywhere; CI (.ci/run) runs it beside its setup
#   PYTHON=python3.10 .ci/check_wheel.sh
#   CHECK_WHEEL_KEEP=1 .ci/check_wheel.sh   # keep the temporary directory to look into
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
PYTHON="${PYTHON:-python3}"
step() { echo "[check_wheel] $*"; }
die() { echo "[check_wheel] FAILED: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null || die "no $PYTHON on PATH (set PYTHON=...)"
git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
  || die "$ROOT is not a git checkout; the source tree to build is taken from git's file list"

WORK="$(cd "$(mktemp -d "${TMPDIR:-/tmp}/tf_svmax_wheel.XXXXXX")" && pwd -P)"
case "$WORK/" in
  "$ROOT"/*) die "the temporary directory $WORK is inside the checkout; set TMPDIR elsewhere" ;;
esac
if [ -n "${CHECK_WHEEL_KEEP:-}" ]; then
  trap 'step "kept $WORK"' EXIT
else
  trap 'rm -rf "$WORK"' EXIT
fi
START=$SECONDS

# The source tree as a fresh clone with the working copy's edits has it: tracked and untracked,
# not ignored files, so no stale tf_svmax.egg-info or build/ of the checkout reaches the sdist.
step "copying the source tree (git's tracked and unignored files) to $WORK/src"
mkdir "$WORK/src"
(
  cd "$ROOT"
  git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' file; do [ -f "$file" ] && printf '%s\0' "$file"; done \
    | tar --null --files-from=- -cf - \
    | tar -xf - -C "$WORK/src"
)

step "tool environment with build and twine (throwaway, not .venv)"
"$PYTHON" -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install --quiet --disable-pip-version-check build twine

step "building the sdist and, from it, the wheel"
"$WORK/tools/bin/python" -m build --outdir "$WORK/dist" "$WORK/src" >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log" >&2; die "python -m build failed (log above)"; }
shopt -s nullglob
sdists=("$WORK"/dist/*.tar.gz)
wheels=("$WORK"/dist/*.whl)
shopt -u nullglob
[ "${#sdists[@]}" -eq 1 ] && [ "${#wheels[@]}" -eq 1 ] \
  || die "expected one sdist and one wheel in $WORK/dist, found: $(ls "$WORK/dist")"
SDIST="${sdists[0]}"
WHEEL="${wheels[0]}"
step "built $(basename "$SDIST") and $(basename "$WHEEL")"

step "twine check --strict"
"$WORK/tools/bin/python" -m twine check --strict "$SDIST" "$WHEEL"

step "contents and metadata"
"$WORK/tools/bin/python" - "$ROOT" "$SDIST" "$WHEEL" <<'PYEOF'
import ast
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

root, sdist, wheel = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
problems = []
version = next(
    ast.literal_eval(node.value)
    for node in ast.parse((root / "tf_svmax" / "__init__.py").read_text()).body
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__"
)

names = zipfile.ZipFile(wheel).namelist()
dist_info = f"tf_svmax-{version}.dist-info"
tops = sorted({name.split("/")[0] for name in names})
# One package: the validators and name tables without Keras are tf_svmax/_args.py.
if tops != sorted(["tf_svmax", dist_info]):
    problems.append(f"wheel top level is {tops}, expected only tf_svmax/ and {dist_info}/")
for forbidden in ("tests/", "trainers/", "benchmarks/"):
    if any(forbidden in name for name in names):
        problems.append(f"wheel contains {forbidden}")
sources = {p.relative_to(root).as_posix() for p in (root / "tf_svmax").rglob("*.py")}
missing = sorted(sources - set(names))
if missing:
    problems.append(f"wheel lacks {len(missing)} module(s) of tf_svmax/: {missing[:5]}")
license_path = f"{dist_info}/licenses/LICENSE"
if license_path not in names:
    problems.append(f"wheel lacks {license_path}")
elif zipfile.ZipFile(wheel).read(license_path) != (root / "LICENSE").read_bytes():
    problems.append(f"wheel's {license_path} differs from LICENSE")

metadata = Parser().parsestr(zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode())
expected = {"Name": "tf_svmax", "Version": version, "License-Expression": "Apache-2.0"}
for field, value in expected.items():
    if metadata[field] != value:
        problems.append(f"METADATA {field} is {metadata[field]!r}, expected {value!r}")
extras = set(metadata.get_all("Provides-Extra") or [])
if not {"cpu", "gpu", "jax", "torch", "trainers", "docs", "testtools", "test", "bench"} <= extras:
    problems.append(f"METADATA extras are {sorted(extras)}")
if not (metadata.get_payload() or "").lstrip().startswith("#"):
    problems.append("METADATA has no README (Markdown) as its long description")

members = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
for needed in ("pyproject.toml", "README.md", "LICENSE", "tf_svmax/__init__.py", "tf_svmax/_args.py"):
    if needed not in members:
        problems.append(f"sdist lacks {needed}")
for forbidden in ("tests/", "trainers/", "benchmarks/"):
    if any(member.startswith(forbidden) for member in members):
        problems.append(f"sdist contains {forbidden} (MANIFEST.in prunes tests/)")

if problems:
    sys.exit("\n".join(f"[check_wheel] FAILED: {problem}" for problem in problems))
modules = sum(name.endswith(".py") for name in names)
print(
    f"[check_wheel] wheel: {modules} modules (tf_svmax/), {license_path}, "
    f"no tests/ trainers/ benchmarks/; METADATA {version}, Apache-2.0, extras {sorted(extras)}; "
    f"sdist: {len(members)} files incl. pyproject.toml, README.md, LICENSE, no tests/"
)
PYEOF

step "fresh virtual environment: pip install $(basename "$WHEEL")[cpu]"
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$WHEEL[cpu]" \
  || die "pip install of the wheel with its cpu extra failed"

step "the installed wheel at work (from $WORK/run, python -I: the checkout is not importable)"
mkdir "$WORK/run"
cp "$ROOT/.ci/wheel_smoke.py" "$WORK/run/"
(cd "$WORK/run" && "$WORK/venv/bin/python" -I wheel_smoke.py "$ROOT" "$WORK/run") \
  || die "the installed wheel's smoke test failed (output above)"

step "fresh virtual environment without TensorFlow: pip install $(basename "$WHEEL")[jax]"
"$PYTHON" -m venv "$WORK/venv_jax"
"$WORK/venv_jax/bin/python" -m pip install --quiet --disable-pip-version-check "$WHEEL[jax]" \
  || die "pip install of the wheel with its jax extra failed"

step "the installed wheel on KERAS_BACKEND=jax, TensorFlow absent (python -I, from $WORK/run)"
cp "$ROOT/.ci/backend_smoke.py" "$WORK/run/"
(cd "$WORK/run" && KERAS_BACKEND=jax "$WORK/venv_jax/bin/python" -I backend_smoke.py) \
  || die "the wheel's smoke test on JAX without TensorFlow failed (output above)"

step "OK in $((SECONDS - START)) s (then the temporary directory is removed)"
