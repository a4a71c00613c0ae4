#!/usr/bin/env bash
# The GPU half of the tests and benchmarks in one run, for a GPU machine that is ours for a few
# minutes. From a checkout, with CuPy (and, for the comparison columns, PyTorch) installed:
#
#     bash benchmarks/gpu_check.sh [log_folder]
#
# Each part runs under its own time limit, so a slow one cannot eat the others' time (about
# fifteen minutes in all at most); each part's whole output is kept in log_folder, and a short
# table of what came out is printed at the end. Nothing here changes the GPU's settings.
# PYTHON picks the interpreter (default python3).
set -u
logs="${1:-$(mktemp -d -t tg-gpu-check-XXXX)}"
mkdir -p "$logs" && logs="$(cd "$logs" && pwd)"      # a relative folder means one under the caller's
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
summary=()

part() {        # part NAME SECONDS COMMAND...: run it, keep its log, note how it ended
    local name=$1 limit=$2 start=$SECONDS status
    shift 2
    echo "=== $name: $* (limit ${limit} s)"
    timeout "$limit" "$@" 2>&1 | tee "$logs/$name.log"
    status=${PIPESTATUS[0]}
    summary+=("$(printf '%-9s exit %-3s %4d s   %s' "$name" "$status" $((SECONDS - start)) "$*")")
}

part gpu        10 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
part tests      90 "$py" -m pytest -q -m gpu tests
# The suite's cuda pass, as CI runs it through the CuPy stand-in (README, "The cuda path without a GPU").
if "$py" -c "import sys, tinygrad_gpu as tg; sys.exit(not tg.cuda_available())" 2>/dev/null; then
    part cudapass  220 env TINYGRAD_GPU_DEVICE=cuda "$py" -m pytest -q -p no:cacheprovider tests
else
    part cudapass    5 echo "skipped: no GPU visible to CuPy"
fi
part readiness  60 "$py" benchmarks/gpu_readiness.py --real
part readyhalf  60 "$py" benchmarks/gpu_readiness.py --real --config gpu --dtype bfloat16
# The GPU config in float32, TF32, bfloat16 and float16: tokens/s and MFU, ours and PyTorch's autocast.
part precision 150 "$py" benchmarks/mixed_precision.py --device cuda --steps 5
part kernels    60 "$py" benchmarks/kernels.py
part step      100 "$py" benchmarks/step.py --device cuda --config all --json "$logs/step.json"
part scaling    45 "$py" benchmarks/scaling.py --device cuda --with-torch --quick
part infer      90 "$py" benchmarks/train_vs_infer.py --device cuda
part nccl       60 "$py" benchmarks/data_parallel.py --nccl

echo
echo "=== summary (logs in $logs)"
printf '%s\n' "${summary[@]}"
for name in tests cudapass; do echo "$name: $(grep -h -E "passed|failed|error" "$logs/$name.log" | tail -1)"; done
grep -h -E "^(==|step +syncs +host ms| +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+\*? +(host|GPU)|host syncs per step)" \
    "$logs/readiness.log" "$logs/readyhalf.log"          # each step's host and GPU time, and which bounds it
grep -h -E "^(GPT|engine|ours|torch)" "$logs/precision.log"
grep -h -E "^(kernel +shape|layernorm fwd vs naive)" "$logs/kernels.log"    # layer norm's ladder: speed-up = naive / block
grep -h -E "^(nccl: |step time|.*(MISMATCH|FAILED|skipped: ))" "$logs/nccl.log"
"$py" - "$logs/step.json" <<'EOF'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"step.py wrote no results ({e})")
print(f"{'config':<8}{'implementation':<16}{'ms/step':>10}{'tokens/s':>12}{'peak MB':>10}")
for config in report:
    for row in config["rows"]:
        if "median_ms" in row:
            print(f"{config['config']:<8}{row['name']:<16}{row['median_ms']:10.2f}{row['tokens_per_s']:12,.0f}"
                  f"{row['peak_mb']:10.1f}")
        else:
            print(f"{config['config']:<8}{row['name']:<16}  {row.get('skipped') or row.get('failed')}")
EOF
