#!/usr/bin/env bash
# Issue 58 in one call of the GPU machine (JAX + PyTorch, no TensorFlow, no network), <= 9 min:
#   1. the carried wheels (.whl: keras, namex, optree, pytorch-metric-learning) into /tmp/site;
#   2. python -m benchmarks.gpu --grid=full, time-boxed, writing gpu.{json,csv,png} into $OUT;
#   3. the backend-neutral tests (tests/conftest.py's ALL_BACKENDS) on KERAS_BACKEND=jax and
#      torch at once, each stopped with SIGINT before the end so its JUnit report is written.
# $OUT ends with at most 8 files: run.log, gpu.json, gpu.csv, gpu.png, junit_{jax,torch}.xml,
# tests_{jax,torch}.log. benchmarks/README.md gives the device tool's call.
#
# Settings (environment; the defaults are the device run's, tests/benchmarks/test_gpu_device_run.py
# runs the script on a CPU with tiny ones):
#   OUT                       the folder whose files come back (required)
#   PYTHON                    python3
#   GPU_RUN_SKIP_INSTALL      1: no wheels to install (they are installed already)
#   GPU_RUN_GRID              full (or tiny)
#   GPU_RUN_BENCH_BUDGET_S    240: benchmarks.gpu --time_budget_s
#   GPU_RUN_TOTAL_S           530: the whole script's limit; the tests get what is left of it
#   GPU_RUN_TESTS             tests (pytest's arguments: files or folders)
#   GPU_RUN_TEST_WORKERS      6: pytest-xdist workers per backend (0: none)
#   GPU_RUN_TEST_TIMEOUT_S    120: pytest-timeout's limit per test, where it is installed
set -uo pipefail # no -e: every step runs, each one's report is written
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder whose files come back}"
started=$SECONDS
PYTHON=${PYTHON:-python3}
GRID=${GPU_RUN_GRID:-full}
BUDGET=${GPU_RUN_BENCH_BUDGET_S:-240}
TOTAL=${GPU_RUN_TOTAL_S:-530}
TESTS=${GPU_RUN_TESTS:-tests}
WORKERS=${GPU_RUN_TEST_WORKERS:-6}
PER_TEST=${GPU_RUN_TEST_TIMEOUT_S:-120}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
tee_pid=$!
export PYTHONUNBUFFERED=1
# Several processes share the GPU (the tests' workers, JAX beside PyTorch): JAX would otherwise
# take 75 % of its memory at its start.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export TF_CPP_MIN_LOG_LEVEL=2

echo "== $(date -u +%FT%TZ) install"
if [ "${GPU_RUN_SKIP_INSTALL:-0}" != 1 ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "the wheels did not install"; exit 3; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
"$PYTHON" -m pip list 2>/dev/null | grep -i -E \
  "^(jax|jaxlib|jax-cuda[0-9]+-(plugin|pjrt)|torch|keras|namex|optree|numpy|scipy|scikit-learn|ml.dtypes|h5py|pytorch-metric-learning|pytest|pytest-xdist|pytest-timeout) "

echo "== $(date -u +%FT%TZ) benchmark (grid $GRID, budget ${BUDGET} s)"
# benchmarks.gpu stops its workers 20 s past their shares; the timeout is a last resort.
timeout -k 10 $((BUDGET + 60)) "$PYTHON" -m benchmarks.gpu --grid="$GRID" \
  --time_budget_s="$BUDGET" --output_dir="$OUT"
echo "benchmark exit status $?"

left=$((TOTAL - (SECONDS - started) - 40)) # the interrupt's reports and the kill's margin
[ "$left" -gt 10 ] || left=10
echo "== $(date -u +%FT%TZ) tests on jax and torch at once, ${left} s"
options=(-q -p no:cacheprovider -rfE --durations=15 -o junit_family=xunit2)
if [ "$WORKERS" -gt 0 ] && "$PYTHON" -c "import xdist" 2>/dev/null; then
  options+=(-n "$WORKERS")
fi
if "$PYTHON" -c "import pytest_timeout" 2>/dev/null; then
  options+=(--timeout="$PER_TEST")
fi
pids=()
for backend in jax torch; do
  # SIGINT to pytest alone (--foreground: not to its xdist workers, or it hangs): it stops as
  # after Ctrl-C and still writes its JUnit report and summary (~10 s).
  KERAS_BACKEND=$backend timeout --foreground -s INT -k 30 "$left" "$PYTHON" -m pytest "${options[@]}" \
    --junitxml="$OUT/junit_$backend.xml" $TESTS >"$OUT/tests_$backend.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  wait "${pids[$i]}"
  echo "tests on $([ "$i" = 0 ] && echo jax || echo torch): exit status $?"
done
for backend in jax torch; do
  echo "-- tests_$backend.log (end)"
  tail -n 25 "$OUT/tests_$backend.log"
done
echo "== $(date -u +%FT%TZ) done after $((SECONDS - started)) s; files in \$OUT:"
ls -la "$OUT"
exec >&- 2>&-
wait "$tee_pid" # run.log whole before the files go back
