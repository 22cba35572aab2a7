#!/bin/sh
# kornia's own gradient tests (gradcheck, backward, SGD-step) in float16/bfloat16, without and with
# the shim's plugin, for one release: tools/upstream_grad_half.py selects the ids,
# tools/upstream_tests.py records the runs (UPSTREAM_GRADCHECK=1 records what gradcheck was given).
# Usage: PY=<python of an environment with kornia RELEASE> tools/run_upstream_grad_survey.sh RELEASE [MODES]
#   MODES: default "half-noshim half-shim"; also f32-noshim f32-shim (compare: must be identical).
# Checkout in $UPSTREAM/v$RELEASE; records in $RUNS/$RELEASE/<mode>.jsonl (resumed if present).
# Then: python tools/upstream_grad_half.py table 0.7.4=$RUNS/0.7.4 0.8.2=$RUNS/0.8.2 ...
set -eu
RELEASE=$1; shift
MODES=${*:-"half-noshim half-shim"}
HERE=$(cd "$(dirname "$0")/.." && pwd)
UPSTREAM=${UPSTREAM:-$HERE/../upstream}; RUNS=${RUNS:-$HERE/../grad_runs}; PY=${PY:-python}
CHECKOUT=$UPSTREAM/v$RELEASE; OUT=$RUNS/$RELEASE
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 UPSTREAM_GRADCHECK=1
for MODE in $MODES; do
  case $MODE in
    half-shim) FLAGS=""; DTYPE=float16,bfloat16;;
    half-noshim) FLAGS="--no-shim"; DTYPE=float16,bfloat16;;
    f32-shim) FLAGS=""; DTYPE=float32;;
    f32-noshim) FLAGS="--no-shim"; DTYPE=float32;;
    *) echo "unknown mode $MODE" >&2; exit 2;;
  esac
  IDS=$OUT/ids-$DTYPE.txt
  [ -s "$IDS" ] || nice -n 19 "$PY" "$HERE/tools/upstream_grad_half.py" ids "$CHECKOUT" --dtype "$DTYPE" --out "$IDS" > "$IDS.files"
  [ -e "$OUT/$MODE.jsonl.done" ] && continue
  echo "$(date +%T) $RELEASE $MODE"
  nice -n 19 "$PY" "$HERE/tools/upstream_tests.py" record "$CHECKOUT" $(cat "$IDS.files") --out "$OUT/$MODE.jsonl" \
    --dtype "$DTYPE" --only-ids "$IDS" --timeout "${TIMEOUT:-120}" $FLAGS
  touch "$OUT/$MODE.jsonl.done"
done
