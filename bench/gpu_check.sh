#!/usr/bin/env bash
# The prepared GPU check of the cuda target: one H200, under 8 minutes, one table at the end.
#
#   bench/gpu_check.sh [OUT]             # on a machine with a CUDA GPU (torch with CUDA, triton, transformers)
#   bench/gpu_check.sh --dry-run [OUT]   # the same steps, tiny, on the CPU (Triton's interpreter)
#
# Steps, each bounded by its own timeout, each leaving its output in OUT (default: a new temporary
# folder), a failed step a row of the table rather than the end of the check:
#   1. the suite's GPU tests: tests/targets/cuda/test_gpu.py (the cuda target's kernels on the
#      device against the cpu target; skipped without a GPU) and the tests whose path depends on
#      a GPU being there (tests/bench/test_gpu_decode.py);
#   2. a Qwen3-8B-shaped model with random bf16 weights (bench/gpu_qwen3_8b.py build), then its
#      prefill and decode tokens/s on strata's cuda target against HF eager and torch.compile on
#      the same weights, and decode's share of the HBM bandwidth (bench/gpu_qwen3_8b.py bench);
#   3. `strata serve MODEL --target cuda` at 1 and 64 clients (bench/gpu_serve.py): the server's
#      scheduler over the cuda target's `step_paged`;
#   4. the table (bench/gpu_table.py).
# Without a CUDA GPU (and without --dry-run) it prints one line and exits 2.
# PYTHON picks the interpreter (default: python3); the checkout is put on PYTHONPATH.

set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
DRY=0
if [ "${1:-}" = "--dry-run" ]; then
    DRY=1
    shift
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false

if [ "$DRY" = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: needs a CUDA GPU (torch.cuda.is_available() is false in $PY); bench/gpu_check.sh --dry-run runs it tiny on the CPU" >&2
    exit 2
fi
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")}
mkdir -p "$OUT" || exit 2
cd "$ROOT" || exit 2
START=$(date +%s)

step() {  # step NAME SECONDS COMMAND...: run with a timeout, output to OUT/NAME.log, a line of its time
    local name=$1 limit=$2
    shift 2
    local t0
    t0=$(date +%s)
    timeout --kill-after=20 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "gpu_check: $name: exit $rc in $(( $(date +%s) - t0 )) s (log: $OUT/$name.log)" >&2
    return $rc
}

if [ "$DRY" = 1 ]; then
    BUILD=(--tiny); BENCH=(--interpret --prompt 8 --new 4 --reps 1); SERVE=(--interpret --clients 1,4 --prompt 8 --new 4)
    TEST_LIMIT=300; BUILD_LIMIT=120; BENCH_LIMIT=300; SERVE_START=120; SERVE_LOAD=60
else
    # worst case 100 + 60 + 170 + (75 + 3 * 20 + 10) s = 475 s: under 8 minutes with every step at its limit
    BUILD=(); BENCH=(--prompt 512 --new 128 --reps 2); SERVE=(--clients 1,64 --prompt 128 --new 64)
    TEST_LIMIT=100; BUILD_LIMIT=60; BENCH_LIMIT=170; SERVE_START=75; SERVE_LOAD=20
fi

step tests "$TEST_LIMIT" "$PY" -m pytest -q -p no:cacheprovider tests/targets/cuda/test_gpu.py \
    tests/bench/test_gpu_decode.py
echo $? >"$OUT/tests.rc"
cp "$OUT/tests.log" "$OUT/tests.txt"

MODEL="$OUT/qwen3-8b"
[ "$DRY" = 1 ] && MODEL="$OUT/qwen3-tiny"
if step build "$BUILD_LIMIT" "$PY" bench/gpu_qwen3_8b.py build "$MODEL" ${BUILD[@]+"${BUILD[@]}"}; then
    step qwen3 "$BENCH_LIMIT" "$PY" bench/gpu_qwen3_8b.py bench "$MODEL" ${BENCH[@]+"${BENCH[@]}"} --json "$OUT/qwen3.json"
    step serve "$((SERVE_START + 3 * SERVE_LOAD + 10))" "$PY" bench/gpu_serve.py "$MODEL" --target cuda ${SERVE[@]+"${SERVE[@]}"} \
        --start-timeout "$SERVE_START" --timeout "$SERVE_LOAD" --json "$OUT/serve.json"
fi

echo "gpu_check: done in $(( $(date +%s) - START )) s; outputs in $OUT" >&2
"$PY" bench/gpu_table.py "$OUT"
