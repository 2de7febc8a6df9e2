#!/bin/bash
# slurm/pipeline.sh — tokenized text to a Hugging Face model as one chain of Slurm jobs: pack (slurm/pack.sbatch,
# one part) → train (slurm/train_1m.sbatch) → export (slurm/export.sbatch). Each job is submitted at once and starts
# when the one before ended OK (--dependency=afterok); a failure leaves the rest pending with
# Reason=DependencyNeverSatisfied (scancel them, fix, resubmit the stage that failed with AFTER=…). Training's
# requeues keep its job id, so the export waits for the run's real end.
#
#   INPUT_LIST=inputs.txt PACKED=/scratch/packed-1m RUN=/scratch/runs/llama-1m \
#     INIT_FROM=/models/Llama-3.1-8B bash slurm/pipeline.sh
#
# Every variable of the three files applies (SEQ_LEN, SP, MODEL_CONFIG, NODES, …), read from this environment,
# except the ones this file sets per stage: OUTPUT (PACKED for pack, RUN for train), DATA (PACKED/part-000), PARTS
# (1: training reads one dataset), TIME and CPUS_PER_TASK (PACK_TIME / PACK_CPUS, TRAIN_TIME, EXPORT_TIME /
# EXPORT_CPUS; empty: each file's default). The last line names the three jobs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${PACKED:?set PACKED to the directory of the packed dataset (ulysses-pack output)}"
: "${RUN:?set RUN to the directory of the training run (its --output)}"
if [[ -n ${SLURM_JOB_ID:-} ]]; then   # each file would run its job's body here instead of submitting it
  echo "error: slurm/pipeline.sh runs inside job $SLURM_JOB_ID — HINT: run it from a login node, outside salloc/sbatch" >&2
  exit 2
fi
unset PLAN_ONLY   # a stage that only plans would submit nothing, and the next would wait on no job

submit() {   # runs a file's submit mode; prints its output on stderr and the job id on stdout
  local out
  out=$("$@") || { echo "$out" >&2; echo "error: submitting $* failed; nothing after it was submitted" >&2; exit 2; }
  echo "$out" >&2
  local id
  id=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' <<<"$out" | tail -n 1)
  if [[ ! $id =~ ^[0-9]+$ ]]; then   # without an id, the next stage would depend on nothing
    echo "error: $* printed no \"Submitted batch job\" line; nothing after it was submitted" >&2
    exit 2
  fi
  echo "$id"
}

pack_env=(OUTPUT="$PACKED" PARTS=1 TIME="${PACK_TIME:-}" CPUS_PER_TASK="${PACK_CPUS:-}")
if [[ -z ${MODEL_CONFIG:-} && -n ${INIT_FROM:-} ]]; then   # the vocabulary pack checks the ids against; for training,
  pack_env+=(MODEL_CONFIG="$INIT_FROM/config.json")        # MODEL_CONFIG would mean "from scratch"
fi
pack=$(submit env "${pack_env[@]}" bash "$here/pack.sbatch")
train=$(submit env AFTER="$pack" OUTPUT="$RUN" DATA="$PACKED/part-000" TIME="${TRAIN_TIME:-}" \
               bash "$here/train_1m.sbatch")
export_job=$(submit env AFTER="$train" RUN="$RUN" TIME="${EXPORT_TIME:-}" CPUS_PER_TASK="${EXPORT_CPUS:-}" \
                    bash "$here/export.sbatch")
echo "[pipeline] pack $pack → train $train → export $export_job (squeue -j $pack,$train,$export_job)"
