#!/usr/bin/env bash
# The device check of the GPU path, as one prepared script that always returns its numbers:
#
#   benchmarks/gpu/run.sh [OUT_DIR]      # default: $OUT, else benchmarks/results
#
# 1. preflight (about 10 s, limit PREFLIGHT_SECONDS): the device, a GEMM, a sparse product
#    and the custom kernels compiled and run once; a failure stops here with its reason;
# 2. the GPU tests (limit GPU_TEST_SECONDS);
# 3. `evireform bench --backend gpu` with a time budget (GPU_BENCH_SECONDS): the cases run in
#    order of value and the JSON is rewritten after every case, so a timeout keeps what was
#    measured; a case that fails is recorded and the others run.
# Defaults fit one call in under 7 minutes (60 + 100 + 260 s at most), leaving a rerun within
# a 15-minute device budget that includes the machine's start.  The bench runs its cases in
# order of value (copy bandwidth, the exact scan at batch 16 and 1,024, the fp16 scan,
# propagation, readout, retrieve_many), each size written to the JSON as it finishes.  Exit status: 0 when every step passed, else the first
# failing step's (preflight 10, tests 20, bench 30), after all steps that could run did.
#
# Needs on the machine: Python >= 3.10, a CUDA driver, CuPy for its CUDA major version
# (cupy-cuda12x or cupy-cuda13x), numpy, scipy, numba and pytest.  Nothing is fetched: wheels
# left in benchmarks/gpu/wheels/ by fetch_wheels.sh (run beforehand on a networked machine)
# are installed with --no-index, and the project with --no-index --no-deps (or, if that
# fails, run from the source tree).  benchmarks/gpu/stage_data.sh, run beforehand, copies the
# MuSiQue files the device retriever test reads into benchmarks/gpu/data/ (ignored by git;
# carry it with the working tree).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1
OUT_DIR="${1:-${OUT:-benchmarks/results}}"
mkdir -p "$OUT_DIR"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
LOG="$OUT_DIR/gpu-$STAMP.log"
JSON="$OUT_DIR/gpu-$STAMP.json"
PY="${PYTHON:-python3}"
PREFLIGHT_S="${PREFLIGHT_SECONDS:-60}"
TEST_S="${GPU_TEST_SECONDS:-100}"
BENCH_S="${GPU_BENCH_SECONDS:-200}"
# the MuSiQue data staged by stage_data.sh (carried with the tree), so the device retriever
# test runs; the default ../shared/data is used where it exists
if [ -z "${EVIREFORM_DATA:-}" ] && [ -d benchmarks/gpu/data/musique ]; then
  export EVIREFORM_DATA="$PWD/benchmarks/gpu/data"
fi
STATUS=0
fail() { [ "$STATUS" -eq 0 ] && STATUS="$1"; }

exec > >(tee "$LOG") 2>&1
echo "== $(date -u)  $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true

echo "== install (offline)"
if [ -n "${SKIP_INSTALL:-}" ]; then
  echo "skipped (SKIP_INSTALL is set)"
elif compgen -G "benchmarks/gpu/wheels/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps benchmarks/gpu/wheels/*.whl || true
fi
if [ -z "${SKIP_INSTALL:-}" ] && ! "$PY" -m pip install -q --no-index --no-deps \
    --no-build-isolation -e . 2> "$OUT_DIR/pip-$STAMP.err"; then
  # e.g. a setuptools older than the build-system asks for: run from the source tree, with
  # kernels/ linked where the package expects evireform.kernels (removed again at exit)
  echo "pip could not install the project (see pip-$STAMP.err); running from the source tree"
  if [ ! -e evireform/kernels ]; then
    ln -s ../kernels evireform/kernels
    trap 'rm -f evireform/kernels' EXIT
  fi
fi

echo "== preflight (limit ${PREFLIGHT_S}s)"
timeout "$PREFLIGHT_S" "$PY" - <<'EOF'
import json, sys, time
t0 = time.perf_counter()
import numpy as np
try:
    # everything the tests and the bench import, so a version mismatch on the image stops
    # here with its reason, before any time is spent
    import numba, scipy, scipy.sparse, pytest  # noqa: F401
    import evireform, evireform.retriever, evireform.bench, evireform.bench.gpu_cases  # noqa
    from evireform.bench.harness import machine
    machine()
except Exception as exc:
    print(f"preflight: an import the bench needs fails: {type(exc).__name__}: {exc}")
    sys.exit(1)
try:
    import cupy, cupyx
    from evireform.kernels import _gpu
    ns = _gpu.gpu_namespace()
except Exception as exc:
    print(f"preflight: no usable GPU namespace: {type(exc).__name__}: {exc}")
    sys.exit(1)
xp = ns.xp
facts = {"cupy": cupy.__version__, "numpy": np.__version__, "numba": numba.__version__,
         "scipy": scipy.__version__,
         "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()}
a = xp.random.random((4096, 384), dtype=xp.float32)
(a @ a.T).sum().item()                                            # cuBLAS
(a.astype(xp.float16) @ a[:64].T.astype(xp.float16)).sum().item()  # fp16 GEMM
S = ns.sparse.random(20000, 5000, density=1e-3, format="csr", dtype=xp.float64)
(S @ S.T).sum()                                                   # cuSPARSE SpGEMM
keys = xp.sort(xp.random.randint(0, 50, 1000)).astype(xp.int64)
_gpu.segment_sums(ns, keys, xp.ones(1000)).sum().item()           # segment.cu via NVRTC
ids, _ = _gpu.cosine_topk_batch(ns, a, a[:8], 10)                 # select.cu compiled
with cupyx.allow_synchronize(False):                              # a search never syncs
    ids, _ = _gpu.cosine_topk_batch(ns, a, a[:8], 10, budget=1 << 22)
assert (ids.get()[:, 0] == np.arange(8)).all(), "cosine top-k does not find the query rows"
ref, _ = _gpu.cosine_topk_reference(ns, a, a[:8], 10)
assert (ids.get() == ref.get()).all(), "the select kernel differs from the reference"
ns.synchronize()
facts["seconds"] = round(time.perf_counter() - t0, 2)
print("preflight ok", json.dumps(facts))
EOF
rc=$?
if [ $rc -ne 0 ]; then
  echo "preflight failed (exit $rc): no tests or bench run"
  exit 10
fi

echo "== GPU tests (limit ${TEST_S}s)"
timeout "$TEST_S" "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    "tests/test_bench.py::test_gpu_cases_run_on_the_cpu_namespace" -rs
rc=$?
echo "tests exit code: $rc"
[ $rc -ne 0 ] && fail 20

echo "== GPU bench (budget ${BENCH_S}s; JSON after every case: $JSON)"
timeout $((BENCH_S + 60)) "$PY" -m evireform bench --backend gpu --time-budget "$BENCH_S" \
    --json "$JSON"
rc=$?
echo "bench exit code: $rc"
[ $rc -ne 0 ] && fail 30
[ -s "$JSON" ] || { echo "no JSON was written"; fail 30; }
echo "== done $(date -u), exit status $STATUS"
exit "$STATUS"
