#!/usr/bin/env bash
# One prepared, offline run for a lent accelerator (an NVIDIA GPU image with JAX and its CUDA
# plugin, flax, optax, orbax-checkpoint and tokenizers preinstalled, no package registry).
#
#   bash scripts/device_check.sh          # on the GPU machine: writes $OUT/device_check.json
#   bash scripts/device_check.sh --dry    # here, on CPU: the same steps with light commands
#
# Nothing is fetched and the preinstalled JAX is never touched: the two small packages the image
# lacks (ml-collections, gguf) come from scripts/wheels/ (pure Python, installed --no-index
# --no-deps into a folder of their own), and specjax runs from this tree through PYTHONPATH.
# Steps, most telling first: the versions (each against pyproject.toml's range), the devices, the
# greedy exactness cells of every drafter kind, the demo run (autoregressive vs speculative), the
# drafter-family table, the profile of one step, the batch sweep with refill. Each step has its own
# time limit and the whole run a budget (TOTAL_LIMIT, default 540 s, inside a 10-minute command);
# a step that would start with too little budget left is recorded as skipped. Logs and tables land
# under the output folder; device_check.json says each step's status, exit code and seconds.
#
# --dry checks this script's logic on any machine: the offline wheel install, the version check,
# the time limits, the budget and the JSON, with each heavy step replaced by its command's --help
# (the modules import and parse their flags). It accepts CPU devices. tests/test_device_check.py runs it.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
MODE=device
[ "${1:-}" = "--dry" ] && MODE=dry
OUT_DIR="${OUT:-$ROOT/device_check_out}"
SITE="${SITE:-/tmp/specjax_device_site}"
TOTAL_LIMIT="${TOTAL_LIMIT:-540}"   # seconds for every step together
PY="${PYTHON:-python3}"
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/steps.tsv"
: >"$RESULTS"
T_START=$(date +%s)

step() {  # step NAME LIMIT_S DEVICE_COMMAND -- DRY_COMMAND
  local name="$1" limit="$2"; shift 2
  local real=() dry=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do real+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  dry=("$@")
  local cmd=("${real[@]}")
  [ "$MODE" = dry ] && cmd=("${dry[@]}")
  local left=$(( TOTAL_LIMIT - ($(date +%s) - T_START) ))
  if [ "$left" -lt 10 ]; then
    printf '%s\tskipped\t-1\t0\t%s\n' "$name" "$limit" >>"$RESULTS"
    echo "$name: skipped (${left}s of the budget left)"
    return
  fi
  [ "$left" -lt "$limit" ] && limit="$left"
  local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "${cmd[@]}" >"$OUT_DIR/$name.log" 2>&1
  local rc=$? status=pass
  [ "$rc" -ne 0 ] && status=fail
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && status=timeout
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$(( $(date +%s) - t0 ))" "$limit" >>"$RESULTS"
  echo "$name: $status (rc=$rc, $(( $(date +%s) - t0 ))s of ${limit}s)"; tail -n 4 "$OUT_DIR/$name.log"
}

# the missing small packages, offline; specjax from this tree (no pip install: the image's JAX stays)
step wheels 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" scripts/wheels/*.whl -- \
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" scripts/wheels/*.whl
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"

# versions against pyproject.toml's ranges, and the devices; writes env.json
ENV_PY='
import importlib.metadata as md, json, pathlib, sys, tomllib
from packaging.requirements import Requirement
mode, out = sys.argv[1], pathlib.Path(sys.argv[2])
deps = [Requirement(d) for d in tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]["dependencies"]]
versions, outside = {}, []
for r in deps:
  try:
    v = md.version(r.name)
  except md.PackageNotFoundError:
    v = None
  versions[r.name] = v
  if v is None or not r.specifier.contains(v, prereleases=True):
    outside.append(f"{r.name} {v} (wanted {r.specifier})")
for extra in ("jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin"):
  try:
    versions[extra] = md.version(extra)
  except md.PackageNotFoundError:
    pass
import jax, specjax
devices = [str(d) for d in jax.devices()]
platform = jax.devices()[0].platform
rec = dict(python=sys.version.split()[0], versions=versions, outside_range=outside, devices=devices,
           platform=platform, specjax_from=str(pathlib.Path(specjax.__file__).parent))
out.write_text(json.dumps(rec, indent=2) + "\n")
print(json.dumps(rec, indent=2))
if outside:
  sys.exit(f"outside pyproject.toml ranges: {outside}")
if mode == "device" and platform != "gpu":
  sys.exit(f"no GPU: jax.devices() is {devices}")
'
step env 90 "$PY" -c "$ENV_PY" device "$OUT_DIR/env.json" -- "$PY" -c "$ENV_PY" dry "$OUT_DIR/env.json"

# greedy speculative == greedy autoregressive on the accelerator, every drafter kind
step exactness 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_exactness_matrix.py -k greedy_cell -- \
  "$PY" -m pytest -q -p no:cacheprovider --collect-only tests/test_exactness_matrix.py -k greedy_cell
step demo 120 "$PY" -m specjax.run --config=configs/demo.py --config.repeats=3 -- \
  "$PY" -c "import specjax.run, specjax.experiment; print('specjax.run imports')"
step families 150 "$PY" -m specjax.bench families --batch_sizes=1,8 --temperatures=0 --repeats=2 \
  --out_dir="$OUT_DIR/families" -- "$PY" -m specjax.bench families --help
step profile 90 "$PY" -m specjax.bench profile --repeats=3 --out_dir="$OUT_DIR/profile" -- \
  "$PY" -m specjax.bench profile --help
step batch_sweep 120 "$PY" -m specjax.bench batch --batch_sizes=1,8,32 --num_prompts=32 \
  --out_dir="$OUT_DIR/batch" -- "$PY" -m specjax.bench batch --help

"$PY" - "$MODE" "$OUT_DIR" "$TOTAL_LIMIT" "$(( $(date +%s) - T_START ))" <<'EOF'
import json, pathlib, sys
mode, out, budget, total = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
steps = []
for line in (out / "steps.tsv").read_text().splitlines():
  name, status, rc, seconds, limit = line.split("\t")
  steps.append(dict(step=name, status=status, rc=int(rc), seconds=int(seconds), limit_s=int(limit)))
env = json.loads((out / "env.json").read_text()) if (out / "env.json").is_file() else None
rec = dict(mode=mode, budget_s=budget, total_s=total, ok=all(s["status"] == "pass" for s in steps),
           env=env, steps=steps)
(out / "device_check.json").write_text(json.dumps(rec, indent=2) + "\n")
print(json.dumps({k: rec[k] for k in ("mode", "total_s", "ok")}), *(f"{s['step']}: {s['status']}" for s in steps),
      sep="\n")
EOF
