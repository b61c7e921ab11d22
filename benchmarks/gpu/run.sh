#!/usr/bin/env bash
# The device check of the GPU path, as one prepared script (about 5 minutes on an H200):
# the GPU tests, then `evireform bench --backend gpu`, writing a dated JSON and log.
#
#   benchmarks/gpu/run.sh [OUT_DIR]      # default: $OUT, else benchmarks/results
#
# Needs on the machine: Python >= 3.10, a CUDA driver, CuPy for its CUDA major version
# (cupy-cuda12x or cupy-cuda13x), numpy, scipy, numba and pytest.  Nothing is fetched: the
# project is installed without dependencies (or, if that fails, put on PYTHONPATH as a
# source tree), and any wheel left in benchmarks/gpu/wheels/ by fetch_wheels.sh (run
# beforehand on a networked machine) is installed offline first.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1
OUT_DIR="${1:-${OUT:-benchmarks/results}}"
mkdir -p "$OUT_DIR"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
LOG="$OUT_DIR/gpu-$STAMP.log"
JSON="$OUT_DIR/gpu-$STAMP.json"
PY="${PYTHON:-python3}"
TEST_S="${GPU_TEST_SECONDS:-120}"
BENCH_S="${GPU_BENCH_SECONDS:-200}"

{
  echo "== $(date -u)  $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
  "$PY" -c "import sys, numpy, scipy, numba, cupy; print(sys.version.split()[0], 'numpy', numpy.__version__, 'scipy', scipy.__version__, 'numba', numba.__version__, 'cupy', cupy.__version__)"

  echo "== install (offline)"
  if compgen -G "benchmarks/gpu/wheels/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps benchmarks/gpu/wheels/*.whl || true
  fi
  if ! "$PY" -m pip install -q --no-deps --no-build-isolation -e . 2> "$OUT_DIR/pip-$STAMP.err"; then
    # e.g. a setuptools older than the build-system asks for: run from the source tree, with
    # kernels/ linked where the package expects evireform.kernels (removed again at exit)
    echo "pip could not install the project (see pip-$STAMP.err); running from the source tree"
    if [ ! -e evireform/kernels ]; then
      ln -s ../kernels evireform/kernels
      trap 'rm -f evireform/kernels' EXIT
    fi
  fi
  "$PY" -c "import evireform.kernels._gpu as g; g.gpu_namespace(); print('GPU namespace ok')"

  echo "== GPU tests (limit ${TEST_S}s)"
  timeout "$TEST_S" "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py \
      "tests/test_bench.py::test_gpu_cases_run_on_the_cpu_namespace" -rs
  echo "tests exit code: $?"

  echo "== GPU bench (budget ${BENCH_S}s)"
  timeout $((BENCH_S + 90)) "$PY" -m evireform bench --backend gpu --time-budget "$BENCH_S" \
      --json "$JSON"
  echo "bench exit code: $?"
  echo "== done $(date -u)"
} 2>&1 | tee "$LOG"
