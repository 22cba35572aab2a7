#!/bin/sh
# The upstream half-precision survey: kornia's own tests at each tag, one directory at a time,
# recorded by tools/upstream_tests.py. Usage: tools/run_upstream_survey.sh RELEASE MODE [DIR...]
#   RELEASE: 0.7.4 | 0.8.2 | 0.8.3 (checkout in $UPSTREAM/v$RELEASE, env $TOX/kornia0XX)
#   MODE:    half (float16,bfloat16 with the plugin) | half-noshim (without it) | f32-shim | f32-noshim |
#            half-dynamo | autocast-f16 | autocast-f16-noshim | autocast-bf16 | autocast-bf16-noshim (kornia's
#            float32 tests inside torch.autocast, with and without the plugin)
# test_dynamo (torch.compile, ~10 s of inductor compilation each on this shared 2-core machine) is
# deselected in every mode but half-dynamo, which runs only those tests.
# Records go to $RUNS/$RELEASE/<mode>-<dir>.jsonl (outside the repository); an existing record
# is resumed, a finished one skipped (delete it to rerun).
set -eu
RELEASE=$1; MODE=$2; shift 2
# Defaults: checkouts and runs beside the clone (never inside it), the tox environments in it.
HERE=$(cd "$(dirname "$0")/.." && pwd)
UPSTREAM=${UPSTREAM:-$HERE/../upstream}; TOX=${TOX:-$HERE/.tox}; RUNS=${RUNS:-$HERE/../surface_runs}
PY=$TOX/kornia$(echo "$RELEASE" | tr -d .)/bin/python
TOOL=$(cd "$(dirname "$0")" && pwd)/upstream_tests.py
DIRS=${*:-"color filters enhance morphology metrics losses feature geometry augmentation"}
case $MODE in
  half) FLAGS="--dtype float16,bfloat16";;
  half-dynamo) FLAGS="--dtype float16,bfloat16";;
  half-noshim) FLAGS="--dtype float16,bfloat16 --no-shim";;
  f32-shim) FLAGS="--dtype float32";;
  f32-noshim) FLAGS="--dtype float32 --no-shim";;
  autocast-f16) FLAGS="--dtype float32 --autocast float16";;
  autocast-f16-noshim) FLAGS="--dtype float32 --autocast float16 --no-shim";;
  autocast-bf16) FLAGS="--dtype float32 --autocast bfloat16";;
  autocast-bf16-noshim) FLAGS="--dtype float32 --autocast bfloat16 --no-shim";;
  *) echo "unknown mode $MODE" >&2; exit 2;;
esac
mkdir -p "$RUNS/$RELEASE"
export OMP_NUM_THREADS=1
for d in $DIRS; do
  out=$RUNS/$RELEASE/$MODE-$(echo "$d" | tr / _).jsonl
  [ -e "$out.done" ] && continue
  echo "$(date +%T) $RELEASE $MODE tests/$d"
  if [ "$MODE" = half-dynamo ]; then K="test_dynamo"; else K="not test_dynamo"; fi
  nice -n 19 "$PY" "$TOOL" record "$UPSTREAM/v$RELEASE" "tests/$d" --out "$out" $FLAGS -k "$K" --timeout "${TIMEOUT:-120}"
  touch "$out.done"
done
