#!/bin/sh
# Regenerate docs/surface/ from the recorded runs (see docs/surface/README.md for the runs).
#   RUNS=/work/surface_runs TOX=/work/main/.tox tools/surface_docs.sh
set -eu
RUNS=${RUNS:-/work/surface_runs}; TOX=${TOX:-/work/main/.tox}
ROOT=$(cd "$(dirname "$0")/.." && pwd); DOCS=$ROOT/docs/surface; TOOLS=$ROOT/tools
SITE=lib/python3.11/site-packages/kornia
cd "$ROOT"
OMP_NUM_THREADS=1 "$TOX/kornia082/bin/python" -W ignore "$TOOLS/half_kernel_probe.py" --markdown "$DOCS/half_kernels.md" >/dev/null
OBS=""
for r in 0.7.0 0.7.4 0.8.2 0.8.3; do
  e=$(echo $r | tr -d .)
  [ -e "$RUNS/apis/$e.jsonl" ] && OBS="$OBS --observed $r=$RUNS/apis/$e.jsonl"
  for f in "$RUNS/$r"/half-*.jsonl; do [ -e "$f" ] && OBS="$OBS --observed $r=$f"; done
done
python3 "$TOOLS/half_call_sites.py" "$TOX/kornia070/$SITE=0.7.0" "$TOX/kornia074/$SITE=0.7.4" "$TOX/kornia082/$SITE=0.8.2" \
  "$TOX/kornia083/$SITE=0.8.3" "$TOX/kornia090/$SITE=0.9.0" $OBS --markdown "$DOCS/call_sites.md" --json "$DOCS/call_sites.json"
python3 "$TOOLS/half_public_apis.py" --render "$RUNS/apis/070.jsonl=0.7.0" "$RUNS/apis/074.jsonl=0.7.4" "$RUNS/apis/082.jsonl=0.8.2" \
  "$RUNS/apis/083.jsonl=0.8.3" --oracle "$RUNS/apis/090.jsonl" --sites "$DOCS/call_sites.json" --markdown "$DOCS/no_half_kernel.md"
for r in 0.7.4 0.8.2 0.8.3; do
  ls "$RUNS/$r"/half-*.jsonl >/dev/null 2>&1 || continue
  python3 "$TOOLS/upstream_tests.py" report "$RUNS/$r"/half-*.jsonl --release "$r" \
    --markdown "$DOCS/upstream_half_$r.md" --tsv "$DOCS/upstream_half_$r.failures.tsv" \
    --note "kornia's tests at tag v$r (git archive of the tag), run by \`tools/run_upstream_survey.sh $r half\` against the installed kornia $r of the tox environment (torch 2.13.0 CPU, this CPU has avx512_fp16) with the shim's pytest plugin from this branch: \`--dtype float16,bfloat16 --device cpu -p no:randomly --timeout=<T> --timeout-method=thread -k 'not test_dynamo'\`, one pytest run per directory, resumed after each crash without the test that died. T = 120 s for 0.8.2, 60 s for 0.8.3 and 0.7.4 (the only timeouts are the float16 oneDNN convolution hang, which never returns)."
done
# float32 with and without the plugin: identical outcomes and failure messages?
OUT=$DOCS/float32_with_and_without_plugin.md
{
  echo "# float32: kornia's own tests with and without the shim's plugin"
  echo
  echo "Same selection as the half runs (\`tools/run_upstream_survey.sh RELEASE f32-shim|f32-noshim [DIR...]\`), \`--dtype float32\`;"
  echo "\`tools/upstream_tests.py compare\` compares, per test id, the outcome and the first line of the failure message."
  for r in 0.7.4 0.8.2 0.8.3; do
    DIRS=""
    for f in "$RUNS/$r"/f32-shim-*.jsonl.done; do
      [ -e "$f" ] || continue
      d=$(basename "$f" .jsonl.done | sed 's/^f32-shim-//')
      [ -e "$RUNS/$r/f32-noshim-$d.jsonl.done" ] && DIRS="$DIRS $d"
    done
    [ -n "$DIRS" ] || continue
    A=$(for d in $DIRS; do printf '%s,' "$RUNS/$r/f32-shim-$d.jsonl"; done)
    B=$(echo "$A" | sed 's/f32-shim-/f32-noshim-/g')
    echo; echo "## $r"; echo
    echo "Directories (both runs finished):$DIRS"; echo
    echo '```'
    python3 "$TOOLS/upstream_tests.py" compare "$A" "$B" | head -60 || true
    echo '```'
  done
} > "$OUT"
