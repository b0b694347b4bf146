#!/usr/bin/env bash
# The GPU checks of one session on a CUDA machine, in priority order, each under its own time limit, so that
# one failing or slow step leaves the others' results:
#   1. the oracle tests on CUDA (pytest -m gpu)                       → OUT/gpu_tests.log
#   2. one FedALA round profiled (benchmarks/gpu_profile.py)            → OUT/profile_fedala.log
#   3. seconds per round, vectorised vs with CUDA graphs (round_time.py) → OUT/round_time.log
#   4. peak GPU memory, 100 CNN clients and 20 ResNet-18 (memory.py)    → OUT/memory.log
#   5. one FedAvg round profiled                                          → OUT/profile_fedavg.log
#   6. FedALA profiled with the steps replayed from CUDA graphs           → OUT/profile_fedala_graphs.log
#   7. the bare SGD step, eager vs graph (cuda_graph_step.py)              → OUT/cuda_graph_step.log
# Usage: FEDALA_LAB_SHARED_DATA=<folder holding fedala-mnist-dir0.1> bash benchmarks/gpu_checks.sh OUT
# Runs from the repository root with the package on PYTHONPATH (nothing is installed).
set -u
OUT=${1:?output folder}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS COMMAND...: run, log, and say how it ended
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc after $((SECONDS - t0))s"
  tail -n "${TAIL:-15}" "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0], 'cuda', \
torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
uptime
# the files that hold gpu tests, named: collecting all of tests/ would import the app's and Flower's packages
GPU_TEST_FILES=$(grep -l "^def test_.*device):" tests/test_*.py)
TAIL=25 step gpu_tests "${GPU_TESTS_S:-120}" python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 -rfE $GPU_TEST_FILES
step profile_fedala "${PROFILE_S:-75}" python3 benchmarks/gpu_profile.py --algo fedala
# the loop backend costs ≈ 20 s a FedAvg round on an H100 (2026-11-27): name it in ROUND_TIME_BACKENDS to rerun it
step round_time "${ROUND_TIME_S:-170}" python3 benchmarks/round_time.py --preset mnist-dir0.1 --device cuda \
  --rounds "${ROUND_TIME_ROUNDS:-5}" --repeats 1 --backends "${ROUND_TIME_BACKENDS:-vectorised,vectorised-graphs}" \
  --algos fedavg,fedala
step memory "${MEMORY_S:-50}" python3 benchmarks/memory.py --device cuda --chunks all
step profile_fedavg "${PROFILE_FEDAVG_S:-45}" python3 benchmarks/gpu_profile.py --algo fedavg
step profile_fedala_graphs "${PROFILE_S:-75}" python3 benchmarks/gpu_profile.py --algo fedala --graphs
step cuda_graph_step "${GRAPH_STEP_S:-45}" python3 benchmarks/cuda_graph_step.py
uptime
