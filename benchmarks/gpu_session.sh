#!/usr/bin/env bash
# The commands run on a GPU machine (the H100 records: a rented one, with no network), kept
# here so that every number in
# benchmarks/results/<name>-*.json and the shipped GPU model can be traced to a command.
#
#   bash benchmarks/gpu_session.sh preflight NAME # only the preflight (below), in seconds
#   bash benchmarks/gpu_session.sh measure NAME   # GPU tests, a first comparison, 2 epochs
#   bash benchmarks/gpu_session.sh ablation NAME  # the full comparison + one paper run
#   bash benchmarks/gpu_session.sh seeds NAME     # the paper profile, seeds 0-2, seed 0 shipped
#   bash benchmarks/gpu_session.sh campaign STAGE...  # python -m benchmarks.campaign (the
#                                                 # stages: python -m benchmarks.campaign --help)
#
# Every stage starts with the preflight (python -m benchmarks.preflight): the imports,
# the trainer's plan for the card printed, 20 steps of the paper model, a record written
# and read back. It fails in seconds, saying what failed, instead of an hour in.
#
# Where the machine's Python has no tyro (the command line's) nor its needs, or no pytest
# (the GPU tests'), fetch their wheels on a machine with a network (`bash
# benchmarks/gpu_wheels.sh`, into the git-ignored .whl/, pytest's into .whl/pytest/) and
# copy .whl/ and .gpu_data/ to the GPU machine with the repository; what is missing is
# installed into /tmp/site below (a machine's own pytest, with its plugins, stays).
#
# Records: `measure` writes NAME-measure.json and NAME-compile.json; `ablation` and `seeds`
# write NAME-paper.json (with its training_runs), the record chapter 14 reads.
#
# The campaign needs MNIST and Fashion-MNIST in .gpu_data (gzipped, as below, for both
# MNIST/raw and FashionMNIST/raw). Its runs stay on the machine (runs/campaign); its
# records and any shipped weights are copied to $OUT.
#
# Needs MNIST under $CAPSNOTES_DATA (default: .gpu_data/ in the repository, copied to
# the machine with it). What should be kept from a stage is copied to $OUT (default
# /tmp/capsnotes-out), the folder to bring back from the machine. To make
# .gpu_data (11 MB, never committed) from a local copy of MNIST:
#   mkdir -p .gpu_data/MNIST/raw && echo /.gpu_data/ >> .git/info/exclude
#   for f in "$CAPSNOTES_DATA"/MNIST/raw/*-ubyte; do gzip -c "$f" > .gpu_data/MNIST/raw/"${f##*/}".gz; done
#
# A command that fails ends the session with its status (set -e), also inside a pipe into
# tail or tee (pipefail); a copy that may find nothing says so with `|| true`. The GPU
# tests run in one process on the machine's pytest (PYTEST below): `-o addopts=` drops
# pyproject.toml's addopts, whose `-n 2` needs pytest-xdist (the machine may have none,
# and two workers would share the one GPU); tests/test_gpu_session.py checks that this
# pytest accepts the line, and that a failed stage fails the session.
set -euo pipefail
stage=${1:?preflight, measure, ablation, seeds or campaign}
name=${2:-h100}
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD:$PWD/book${PYTHONPATH:+:$PYTHONPATH}  # capsnotes and capsbook, uninstalled
export CAPSNOTES_DATA=${CAPSNOTES_DATA:-$PWD/.gpu_data}
out=${OUT:-/tmp/capsnotes-out}
mkdir -p "$out" runs
stamp() { echo "[$(date -u +%T)] $*"; }
PYTEST=(python3 -m pytest -q -x -p no:cacheprovider -o addopts=)

carried() {  # carried MODULE FOLDER: install FOLDER's wheels where MODULE is missing
    if python3 -c "import $1" 2>/dev/null; then
        return 0
    fi
    if ! ls "$2"/*.whl >/dev/null 2>&1; then
        echo "$1 is missing and $2/ has no wheels: run 'bash benchmarks/gpu_wheels.sh'" \
            "where pip has a network, and copy .whl/ here with the repository" >&2
        exit 2
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$2"/*.whl || exit 2
    case ":$PYTHONPATH:" in *:/tmp/site:*) ;; *) export PYTHONPATH=/tmp/site:$PYTHONPATH ;; esac
}
carried tyro .whl
carried pytest .whl/pytest
stamp preflight
timeout 180 python3 -m benchmarks.preflight --device cuda --out runs/preflight \
    || { echo "preflight failed: stopping before $stage" >&2; exit 1; }
cp runs/preflight/preflight.json "$out/" 2>/dev/null || true

case $stage in
preflight)
    ;;
measure)
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)"
    nproc; grep -m1 'model name' /proc/cpuinfo || true  # no such line on some ARM CPUs
    stamp tests
    timeout 180 "${PYTEST[@]}" tests/test_step.py tests/test_fast.py 2>&1 | tail -15
    stamp compare
    timeout 300 python3 -m benchmarks.compare --device cuda --record "$name-measure" \
        2>&1 | tee "$out/compare.log"
    cp "benchmarks/results/$name-measure.json" "$out/"
    stamp "two epochs of the paper profile"
    timeout 90 python3 -m capsnotes train --profile paper --device cuda --epochs 2 \
        --out runs/probe --no-progress --checkpoint-every 100 2>&1 | tail -3
    python3 - <<'PY'
import json
h = json.load(open("runs/probe/history.json"))
for e in h["epochs"]:
    print({k: round(v, 4) for k, v in e.items() if isinstance(v, float) and not k.startswith("step_")})
print("wall", round(h["wall_seconds"], 2), h["session_details"][-1])
PY
    stamp "torch.compile"
    timeout 240 python3 -m benchmarks.compare --device cuda --no-ablation --compile \
        --rounds 2 --record "$name-compile" 2>&1 | tee "$out/compile.log"
    cp "benchmarks/results/$name-compile.json" "$out/" 2>/dev/null || true
    stamp done
    ;;
ablation)  # ran at e70e815, whose paper profile was 100 epochs, x0.955, no averaging
    # (that commit's compare wrote the record and the run; today's record gets the run
    # from benchmarks.runs)
    stamp compare
    timeout 300 python3 -m benchmarks.compare --device cuda --compile \
        --larger-batches 256 512 1024 --record "$name-paper" 2>&1 | tee "$out/compare.log"
    cp "benchmarks/results/$name-paper.json" "$out/"
    seed=0
    stamp "seed $seed"
    /usr/bin/time -f "process wall %e s" python3 -m capsnotes train --profile paper \
        --device cuda --seed "$seed" --out "runs/paper-seed$seed" --no-progress \
        --checkpoint-every 1000 2>&1 | tail -3 | tee "$out/seed0.log"
    cp runs/paper-seed0/history.json "$out/seed0-history.json"
    python3 -m benchmarks.runs --record "$name-paper" runs/paper-seed0  # training_runs
    cp "benchmarks/results/$name-paper.json" "$out/"
    python3 tools/ship_pretrained.py runs/paper-seed0 --name mnist
    cp capsnotes/training/weights/mnist.safetensors capsnotes/training/weights/mnist.json "$out/"
    stamp done
    ;;
seeds)
    timeout 120 "${PYTEST[@]}" tests/test_step.py 2>&1 | tail -3
    for seed in 0 1 2; do
        stamp "seed $seed"
        /usr/bin/time -f "process wall %e s" python3 -m capsnotes train --profile paper \
            --device cuda --seed "$seed" --out "runs/paper-seed$seed" --no-progress \
            --checkpoint-every 1000 2>&1 | tail -2
        cp "runs/paper-seed$seed/history.json" "$out/seed$seed-history.json"
    done
    python3 -m benchmarks.runs --record "$name-paper" runs/paper-seed0 runs/paper-seed1 \
        runs/paper-seed2
    cp "benchmarks/results/$name-paper.json" "$out/"
    stamp ship
    python3 tools/ship_pretrained.py runs/paper-seed0 --name mnist
    cp capsnotes/training/weights/mnist.safetensors capsnotes/training/weights/mnist.json "$out/"
    stamp done
    ;;
campaign)
    shift
    timeout 120 "${PYTEST[@]}" tests/test_step.py 2>&1 | tail -3
    stamp "campaign $*"
    # end before the device tool's 10-minute limit, so that what finished comes back: the
    # records are copied whatever the campaign's status, which the session then ends with
    # (124: it ran out of time)
    status=0
    timeout 540 python3 -m benchmarks.campaign --device cuda --out runs/campaign/records \
        --runs runs/campaign/runs --stages "$@" 2>&1 | tail -20 || status=$?
    cp runs/campaign/records/*.json "$out/" 2>/dev/null || true
    cp runs/campaign/records/weights/* "$out/" 2>/dev/null || true
    stamp "done (campaign status $status)"
    exit "$status"
    ;;
*)
    echo "unknown stage $stage (preflight, measure, ablation, seeds or campaign)" >&2
    exit 2
    ;;
esac
