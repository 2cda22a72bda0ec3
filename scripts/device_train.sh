#!/usr/bin/env bash
# Training runs on the GPU machine in one device command: builds the PyTorch extension with the CUDA kernels,
# prepares the corpus once, then runs the plan's training jobs (several at a time, one or more per GPU) and
# packs their run folders (metrics, audits, env, summary; no state files) into $OUT/runs.tgz.
#
#   GPROJ_COMMIT=<commit> bash scripts/device_train.sh PLAN
# (device tool: carry [".gproj_commit", ".prebuilt"]; .prebuilt from scripts/device_prebuild.sh, else the
# extension is built there, about a minute)
#
# PLAN has one job per line, `GPUS NAME ARGS...` (ARGS go to examples/train_gpt.py; GPUS "0" or "0,1": two or
# more GPUs run under torchrun with DDP), and lines `wait` that wait for the jobs started so far. Lines
# starting with # are comments. Every job gets --out $OUT/runs/NAME and --no-save-states (the files the device
# tool brings back are few and small; a plan line may pass --save-states after it, and the states then come back
# as states.tar.part_* pieces); TRAIN_ARGS is appended to every job.
set -uo pipefail
cd "$(dirname "$0")/.."
plan=${1:?usage: device_train.sh PLAN}
[[ -f $plan ]] || { echo "device_train: no plan file $plan" >&2; exit 2; }
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out/runs" "$out/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=python NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

source scripts/device_env.sh  # deps, LD_LIBRARY_PATH, GPROJ_COMMIT, prebuilt
{ echo "gproj commit: $GPROJ_COMMIT"; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; } | tee "$out/logs/env.txt"

t0=$(date +%s)
if [ -n "$prebuilt" ]; then  # scripts/device_prebuild.sh
  install_prebuilt_extension
  echo "== extension prebuilt for $GPROJ_COMMIT"
else
  GPROJ_CUDA=1 MAX_JOBS=16 python3 setup.py build_ext --inplace >"$out/logs/python_build.log" 2>&1 ||
    { tail -30 "$out/logs/python_build.log"; exit 1; }
  echo "== extension built in $(( $(date +%s) - t0 )) s"
fi
python3 examples/prepare_data.py --cache build/data >"$out/logs/prepare_data.log" 2>&1 ||
  { tail -20 "$out/logs/prepare_data.log"; exit 1; }
tail -1 "$out/logs/prepare_data.log"

pids=()
start_job() {  # GPUS NAME ARGS...
  local gpus=$1 name=$2
  shift 2
  local n
  n=$(awk -F, '{print NF}' <<<"$gpus")
  local cmd=(examples/train_gpt.py --data-cache build/data --out "$out/runs/$name" --no-save-states "$@" ${TRAIN_ARGS:-})
  echo "== start $name on GPU $gpus: ${cmd[*]}"
  if [ "$n" -gt 1 ]; then
    CUDA_VISIBLE_DEVICES=$gpus python3 -m torch.distributed.run --standalone --nproc_per_node "$n" "${cmd[@]}" >"$out/logs/$name.log" 2>&1 &
  else
    CUDA_VISIBLE_DEVICES=$gpus python3 "${cmd[@]}" >"$out/logs/$name.log" 2>&1 &
  fi
  pids+=($!)
}
wait_jobs() {
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
}
while read -r line; do
  [[ -z ${line// } || $line == \#* ]] && continue
  if [[ $line == wait ]]; then wait_jobs; continue; fi
  # shellcheck disable=SC2086
  start_job $line
done <"$plan"
wait_jobs

echo "== runs"
python3 examples/summarize_runs.py "$out"/runs/* || true  # a run that died early has no summary: its log says why
# Saved states (plans that pass --save-states after device_train's --no-save-states) travel apart, in 15 MiB
# pieces (the device tool brings back files of at most 16 MiB): cat states.tar.part_* | tar xf -
if compgen -G "$out/runs/*/states/*.safetensors" >/dev/null; then
  ( cd "$out" && tar cf - runs/*/states | split -b 15M - states.tar.part_ && rm -rf runs/*/states )
fi
( cd "$out" && tar czf runs.tgz runs logs && rm -rf runs logs )
ls -la "$out"
