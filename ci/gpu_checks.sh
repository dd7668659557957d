#!/usr/bin/env bash
# The GPU checks in one command, on a machine with a CUDA GPU, torch and numba-cuda:
#
#     bash ci/gpu_checks.sh [TESTS] [REPORT_SECTIONS]
#
# TESTS: pytest paths (default: tests/test_gpu.py and the simulator test files,
# run on the device); REPORT_SECTIONS: benchmarks/gpu_report.py --only
# (default: all); OVERHEAD=<its flags, e.g. -v> adds benchmarks/gpu_overhead.py, CAPSTONE="--only scan ..."
# the capstone's rows (GPU rows included). Wheels in .whl/ (e.g. mambapy) are installed to a scratch
# directory first. Logs go to $OUT when it is set.
set -u
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
out=${OUT:-/tmp/gpu_checks}
mkdir -p "$out" /tmp/site
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
# numba-cuda 0.30.4 overloads np.row_stack, which numpy 2.5 removed (docs/gpu.md)
printf 'import numpy\nnumpy.row_stack = getattr(numpy, "row_stack", numpy.vstack)\n' \
    > /tmp/site/sitecustomize.py
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import numba, numpy, torch; from importlib.metadata import version as v; \
print('numba', numba.__version__, 'numba-cuda', v('numba-cuda'), 'numpy', numpy.__version__, \
'torch', torch.__version__)"
tests=${1:-"tests/test_gpu.py tests/associativity/test_cuda_sim.py tests/associativity/test_topk_cuda_sim.py tests/symmetry/test_cuda_sim.py tests/case_studies/mamba/test_cuda_sim.py tests/test_cuda_simulator.py"}
sections=${2:-}
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
REPORT_TIMEOUT=${REPORT_TIMEOUT:-300}
if [ "$tests" != "none" ]; then
    # shellcheck disable=SC2086
    timeout "$TEST_TIMEOUT" python3 -m pytest -p no:cacheprovider -o addopts="" -q -n 8 \
        -m "gpu or not gpu" $tests > "$out/tests.log" 2>&1
    echo "tests: exit $?"
    grep -E "passed|failed|error" "$out/tests.log" | tail -3
    grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -20
fi
if [ -n "${OVERHEAD:-}" ]; then
    timeout 120 python3 -m benchmarks.gpu_overhead $OVERHEAD > "$out/overhead.log" 2>&1
    echo "overhead: exit $?"
    head -20 "$out/overhead.log"
fi
if [ -n "${CAPSTONE:-}" ]; then
    # shellcheck disable=SC2086
    timeout 240 python3 -m propopt_case_studies.capstone --size small $CAPSTONE > "$out/capstone.log" 2>&1
    echo "capstone: exit $?"
    grep -iE "cuda|gpu" "$out/capstone.log" | head -20
fi
if [ "$sections" != "none" ]; then
    timeout "$REPORT_TIMEOUT" python3 -m benchmarks.gpu_report ${sections:+--only "$sections"} \
        > "$out/report.log" 2>&1
    echo "report: exit $?"
    cat "$out/report.log"
fi
