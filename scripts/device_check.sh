#!/usr/bin/env bash
# One prepared run for a lent accelerator (an NVIDIA GPU; check the device tool's `status` first).
#
#   bash scripts/device_check.sh            # writes $OUT/device_check.json (or ./device_check_out/)
#
# Installs the CUDA build of JAX into a fresh venv, then: the demo run (AR vs speculative), the
# drafter-family table at batch 1 and 8 (greedy), the profile of one step, and the batch sweep
# with refill. Each step has its own time limit so one slow piece cannot eat the whole lease;
# every step's log and table land under the output folder, and device_check.json says which
# steps passed and how long each took.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${OUT:-$PWD/device_check_out}"
mkdir -p "$OUT_DIR"
STEP_LIMIT="${STEP_LIMIT:-150}"   # seconds per step
python3 -m venv /tmp/sj_cuda_venv && . /tmp/sj_cuda_venv/bin/activate
pip install -q -e . "jax[cuda12]==0.10.2" >"$OUT_DIR/install.log" 2>&1 || { echo "install failed"; tail "$OUT_DIR/install.log"; }
python -c "import jax; print(jax.devices())" | tee "$OUT_DIR/devices.txt"

results=()
step() {  # step NAME COMMAND...
  local name="$1"; shift
  local t0=$(date +%s)
  timeout "$STEP_LIMIT" "$@" >"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  results+=("{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $(( $(date +%s) - t0 ))}")
  echo "$name: rc=$rc"; tail -n 5 "$OUT_DIR/$name.log"
}
step demo python -m specjax.run --config.repeats=3
step families python -m specjax.bench families --batch_sizes=1,8 --temperatures=0 --out_dir="$OUT_DIR/families"
step profile python -m specjax.bench profile --out_dir="$OUT_DIR/profile"
step batch_sweep python -m specjax.bench batch --out_dir="$OUT_DIR/batch"
(IFS=,; echo "{\"devices\": \"$(tr -d '"\n' <"$OUT_DIR/devices.txt")\", \"steps\": [${results[*]}]}") >"$OUT_DIR/device_check.json"
cat "$OUT_DIR/device_check.json"
