#!/usr/bin/env bash
# Smoke run of the training experiment (examples/): every attention variant on a tiny CPU GPT, then the plots.
# Run after scripts/python_test.sh (needs build/venv and the built gproj._C); exits non-zero if an output is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

py=build/venv/bin/python
out=build/train_smoke
variants=(sdpa-bf16 gproj-baseline gproj-fwdfix gproj-gproj fp32)
start=$SECONDS

"$py" -c 'import matplotlib' 2>/dev/null || "$py" -m pip install -q --disable-pip-version-check "matplotlib>=3.7"
rm -rf "$out/runs" "$out/plots"

for variant in "${variants[@]}"; do
  PYTHONPATH=python "$py" examples/train_gpt.py --attention "$variant" --device cpu --threads 2 \
    --layers 2 --d-model 64 --heads 2 --context 64 --batch 4 --steps 6 --warmup 2 \
    --audit-every 3 --eval-every 3 --eval-batches 2 \
    --max-bytes 200000 --data-cache "$out/data" --out "$out/runs/$variant"
done
trained=$SECONDS

"$py" examples/plot_runs.py "$out"/runs/* --out "$out/plots" >/dev/null

missing=0
for variant in "${variants[@]}"; do
  run=$out/runs/$variant
  for f in metrics.jsonl audit.jsonl env.json summary.json states/step0000003_layer00.safetensors \
    states/step0000003_layer01.safetensors; do
    [[ -s $run/$f ]] || { echo "train_smoke: missing $run/$f" >&2; missing=1; }
  done
  [[ $(wc -l <"$run/metrics.jsonl") -eq 6 ]] || { echo "train_smoke: $run/metrics.jsonl has not 6 lines" >&2; missing=1; }
  [[ $(wc -l <"$run/audit.jsonl") -eq 2 ]] || { echo "train_smoke: $run/audit.jsonl has not 2 lines" >&2; missing=1; }
done
for f in loss.png grad_norm.png dq_error.png spectral_norms.png; do
  [[ -s $out/plots/$f ]] || { echo "train_smoke: missing $out/plots/$f" >&2; missing=1; }
done
if [[ -x build/release/gproj ]]; then
  build/release/gproj check --state "$out/runs/gproj-gproj/states/step0000003_layer00.safetensors" --quiet \
    >/dev/null || { echo "train_smoke: gproj check cannot replay a state file" >&2; missing=1; }
fi
[[ $missing -eq 0 ]] || exit 1
echo "train_smoke: ${#variants[@]} variants trained in $((trained - start)) s, plots in $((SECONDS - trained)) s;" \
  "outputs in $out" >&2
