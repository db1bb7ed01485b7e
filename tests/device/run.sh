#!/usr/bin/env bash
# One command on a GPU machine: builds Tilefire with all cores, checks the CUDA backend against its CPU
# twin, and benchmarks it, printing a table last (docs/BENCHMARKS.md says how to read it).
#   1. each CUDA op against its CPU twin on fresh random inputs (awkward shapes included);
#   2. end to end: logits of --backend cuda against --backend cpu on `tiny` and on the Llama-3.2-1B shape
#      (random bf16 weights), greedy tokens compared, every cuda mode bitwise equal;
#   3. the watchdog: an event that can never fire ends the step with an error, not a hang;
#   4. kernel launches per decode step: 1, and 0 in resident mode (counted by the executor);
#   +  the transport on one GPU: R virtual ranks as CTAs of one kernel over one window, and a one-rank
#      NCCL device-API communicator (tensor-parallelism issue);
#   5. the benchmark: decode step latency at batch 1 for the Llama-3.2-1B shape in bf16 (dataflow, bsp,
#      resident), achieved bandwidth against a measured device-to-device copy, and PyTorch (eager and
#      CUDA graph) on the same safetensors.
#   +  on this machine's CPU cores, no GPU: TP=2 with several workers per rank, dataflow against bsp and
#      the collectives' time (the tensor-parallelism issue's CPU overlap figure; CI's 2 cores give each
#      rank one worker).
# Usage: tests/device/run.sh [LOG_DIR]   (default: $OUT if set, else ./device-logs). Full logs go there.
# The machine needs nvcc, CMake, ninja and a C++20 compiler; oneTBB, nlohmann_json and GoogleTest come
# from .device-deps/ when present (scripts/device-deps fills it on a machine with Debian's packages).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
logs=${1:-${OUT:-$root/device-logs}}
mkdir -p "$logs"
build="$root/build-device"
results="$logs/results.txt"
: >"$results"
started=$(date +%s)
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; }  # stage, PASS/FAIL/SKIP, detail
elapsed() { echo $(($(date +%s) - started))s; }
# Every stage after the build runs within what is left of RUN_BUDGET_S seconds (default 500), and is
# skipped when under 20 s are left, so the table prints within a device command's limit (600 s).
seconds_left() { echo $(("${RUN_BUDGET_S:-500}" - ($(date +%s) - started))); }
budget_left() { [ "$(seconds_left)" -ge 20 ]; }
limit() {  # limit SECONDS: the stage's own limit, or what is left of the budget when that is less
  local left
  left=$(seconds_left)
  echo $((left < $1 ? left : $1))
}
# A stage stopped at its limit: TERM first, KILL 15 s later (a process stuck in the driver ignores TERM).
limited() { local seconds=$1; shift; timeout -k 15 "$(limit "$seconds")" "$@"; }
skip_if_late() {  # skip_if_late STAGE: true (and the stage recorded as skipped) when out of time
  if budget_left; then return 1; fi
  record "$1" SKIP "out of time after $(elapsed) (RUN_BUDGET_S)"
  return 0
}

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | tee "$logs/device.txt"

echo "== build ($(nproc) cores)"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEFIRE_BUILD_BENCH=OFF)
if [ -d "$root/.device-deps/usr" ]; then
  cmake_args+=(-DCMAKE_PREFIX_PATH="$root/.device-deps/usr")
  export LD_LIBRARY_PATH="$root/.device-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! { cmake -S "$root" -B "$build" "${cmake_args[@]}" &&
       cmake --build "$build" -j "$(nproc)" --target tilefire cuda_ops_test cuda_watchdog_test cuda_engine_test \
         device_program_test device_transport_test; } >"$logs/build.log" 2>&1; then
  tail -n 40 "$logs/build.log"
  record build FAIL "see build.log"
  echo "build failed after $(elapsed)"
  exit 1
fi
record build PASS "$(elapsed)"
# Registers, shared memory and stack of the persistent kernel per target (ptxas already refused spills).
cuobjdump -res-usage "$build/megakernel/CMakeFiles/tilefire_megakernel.dir/cuda/megakernel.cu.o" 2>/dev/null |
  grep -A1 "Function _ZN8tilefire6device10megakernel" | grep -o "REG:.*" >"$logs/kernel_resources.txt" || true
cli="$build/samples/tilefire"

run_gtest() {  # run_gtest STAGE BINARY [gtest args]; a stage that hangs is stopped at its time limit
  local stage=$1 binary=$2
  shift 2
  skip_if_late "$stage" && return
  if limited "${STAGE_LIMIT_S:-150}" "$build/tests/$binary" --gtest_brief=1 "$@" >"$logs/$stage.log" 2>&1; then
    local passed skipped
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$logs/$stage.log" | tail -n 1)
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$logs/$stage.log" | tail -n 1)
    record "$stage" PASS "${passed:-0} passed, ${skipped:-0} skipped"
  else
    local status=$?
    tail -n 30 "$logs/$stage.log"
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
      record "$stage" FAIL "stopped at its time limit after $(elapsed) (a hang?), see $stage.log"
    else
      record "$stage" FAIL "exit status $status; $(grep -a -c '^\[  FAILED  \] [A-Za-z]' "$logs/$stage.log") failing test lines, see $stage.log"
    fi
  fi
}

echo "== 1. device ops against their CPU twins"
run_gtest ops cuda_ops_test
run_gtest encoding device_program_test
echo "== 3. watchdog"
run_gtest watchdog cuda_watchdog_test
echo "== transport: virtual ranks as CTAs over one window; a one-rank NCCL device communicator"
run_gtest transport device_transport_test
echo "== transport: the megakernel's collective tiles, ranks as executors sharing the GPU"
run_gtest collectives cuda_collectives_test

preset=${TILEFIRE_DEVICE_PRESET:-llama-3.2-1b}  # another preset only for a dry run of this script
model="${TMPDIR:-/tmp}/tilefire-device-$preset-bf16"  # gigabytes: not in the log folder that is sent back
echo "== the $preset shape, random bf16 weights ($(elapsed))"
if skip_if_late gen-model; then
  :
elif ! limited 120 "$cli" gen-model --preset "$preset" --dtype bf16 --seed 1 --out "$model" >"$logs/gen-model.log" 2>&1; then
  record gen-model FAIL "see gen-model.log"
fi

echo "== 2, 4. end to end against the cpu backend; launches per step ($(elapsed))"
TILEFIRE_DEVICE_LARGE_MODEL="$model" STAGE_LIMIT_S=240 run_gtest end-to-end cuda_engine_test

echo "== 5. benchmark ($(elapsed))"
if skip_if_late bench; then
  :
elif limited 180 "$cli" bench --backend cuda --model "$model" --steps 64 --rounds 5 --json >"$logs/bench.json" 2>"$logs/bench.log"; then
  record bench PASS "$(elapsed)"
else
  record bench FAIL "$(tail -n 3 "$logs/bench.log" | tr '\n' ' ')"
fi
if skip_if_late pytorch; then
  :
elif limited 180 python3 "$root/tests/device/torch_decode.py" --model "$model" --prompt-tokens 1,2,3,4,5,6,7,8 --steps 64 \
     --warmup 8 --json "$logs/torch.json" >"$logs/torch.log" 2>&1; then
  record pytorch PASS "$(elapsed)"
else
  record pytorch FAIL "$(tail -n 3 "$logs/torch.log" | tr '\n' ' ')"
fi
budget_left && { limited 90 "$cli" bench --backend cuda --model "$model" --steps 64 --rounds 3 >"$logs/bench.txt" 2>&1 || true; }
# Split-KV attention off (one attention tile per head group), for the row that shows what it buys.
budget_left && { limited 120 "$cli" bench --backend cuda --model "$model" --steps 64 --rounds 3 --kv-splits 1 --json \
  >"$logs/bench_unsplit.json" 2>"$logs/bench_unsplit.log" || true; }
# One decode step's timeline on the device (a row per CTA), for tuning; busy share in the table.
if skip_if_late trace; then
  :
elif limited 120 "$cli" run --backend cuda --model "$model" --prompt-tokens 1,2,3,4 --max-new-tokens 2 \
     --trace "$logs/decode_trace.json" >"$logs/trace.log" 2>&1; then
  record trace PASS "decode_trace.json"
else
  record trace FAIL "$(tail -n 3 "$logs/trace.log" | tr '\n' ' ')"
fi

# The H200 model fitted to that traced step (simulator issue): the dispatch gap, the signal latency and
# the bandwidth read off the trace, and the step predicted with them against the preset's prediction.
# The traced step attends to 5 positions (a 4-token prompt, its first decode step).
if [ -s "$logs/decode_trace.json" ] && ! skip_if_late h200-fit; then
  if limited 60 "$cli" simulate --model "$model" --device h200 --context 5 --fit-trace "$logs/decode_trace.json" \
       --fit-out "$logs/h200_fitted.json" --json >"$logs/fit.json" 2>"$logs/fit.log"; then
    record h200-fit PASS "h200_fitted.json"
  else
    record h200-fit FAIL "$(tail -n 3 "$logs/fit.log" | tr '\n' ' ')"
  fi
fi

# Tensor parallelism on this one GPU: two ranks as executors sharing its SMs (virtual ranks), against
# one rank on all of them in the same rounds. Not a speed-up (each rank has half the SMs and its
# collectives cross no link); it shows what the collective tiles cost inside the kernel.
if ! skip_if_late tp2; then
  if limited 120 "$cli" bench --backend cuda --model "$model" --tp 2 --steps 32 --rounds 3 --json \
       >"$logs/bench_tp2.json" 2>"$logs/bench_tp2.log"; then
    record tp2 PASS "bench_tp2.json"
  else
    record tp2 FAIL "$(tail -n 3 "$logs/bench_tp2.log" | tr '\n' ' ')"
  fi
fi

# Tensor parallelism on this machine's CPU cores (tensor-parallelism issue): how much of the collective
# time dataflow hides needs ranks with several workers each, which the 2-core CI machine cannot give.
# The small preset, TP=2 with half the threads per rank, against TP=1 in the same rounds; TP=1's own
# bsp / dataflow is the control (what dataflow gains with no collective); rank 0's traced bsp step gives
# the collectives' time (the spans of their nodes: under bsp nothing runs beside them).
cpu_threads=$(($(nproc) >= 16 ? 16 : $(nproc) / 2 * 2))
if [ "$cpu_threads" -ge 4 ] && ! skip_if_late cpu-tp; then
  small="${TMPDIR:-/tmp}/tilefire-device-small-bf16"
  if limited 60 "$cli" bench --preset small --dtype bf16 --threads "$cpu_threads" --tp 2 --steps 16 --rounds 5 --json \
       >"$logs/cpu_tp2.json" 2>"$logs/cpu_tp.log" &&
     limited 60 "$cli" bench --preset small --dtype bf16 --threads "$cpu_threads" --steps 16 --rounds 5 --json \
       >"$logs/cpu_tp1.json" 2>>"$logs/cpu_tp.log" &&
     limited 60 "$cli" gen-model --preset small --dtype bf16 --seed 1 --out "$small" >>"$logs/cpu_tp.log" 2>&1 &&
     limited 60 "$cli" run --model "$small" --threads "$cpu_threads" --tp 2 --schedule bsp --prompt-tokens 1,2,3,4,5,6,7,8 \
       --max-new-tokens 4 --trace "$logs/cpu_tp2_bsp_trace.json" >>"$logs/cpu_tp.log" 2>&1; then
    record cpu-tp PASS "$cpu_threads threads"
  else
    record cpu-tp FAIL "$(tail -n 3 "$logs/cpu_tp.log" | tr '\n' ' ')"
  fi
fi

echo "== summary ($(elapsed))"
python3 - "$results" "$logs" <<'PY'
import json, os, sys
results, logs = sys.argv[1], sys.argv[2]
def load(name):
    try:
        with open(os.path.join(logs, name)) as f:
            return json.load(f)
    except Exception:
        return None
bench, torch, unsplit, trace = load("bench.json"), load("torch.json"), load("bench_unsplit.json"), load("decode_trace.json")
tp2 = load("bench_tp2.json")
fit = load("fit.json")
print("| check | result | detail |")
print("|---|---|---|")
for line in open(results):
    stage, status, detail = line.rstrip("\n").split("\t", 2)
    print(f"| {stage} | {status} | {detail} |")
if os.path.exists(os.path.join(logs, "kernel_resources.txt")):
    for line in open(os.path.join(logs, "kernel_resources.txt")):
        print(f"| kernel resources | - | {line.strip()} |")
if bench:
    print()
    print(f"device: {bench['device']}, {bench['threads']} CTAs; {bench['model']}; {bench['step_bytes']/1e6:.1f} MB per step; "
          f"measured copy {bench['measured_copy_gbs']:.0f} GB/s")
    print("| decode step (batch 1, bf16) | ms | GB/s | share of measured copy | launches per step |")
    print("|---|---|---|---|---|")
    launches = bench.get("launches_per_step", {})
    for mode, key in (("dataflow", "dataflow_step_ms"), ("bsp", "bsp_step_ms"), ("resident", "resident_step_ms")):
        ms = bench.get(key)
        if ms:
            gbs = bench["step_bytes"] / (ms * 1e-3) / 1e9
            print(f"| tilefire {mode} | {ms:.4f} | {gbs:.0f} | {100*gbs/bench['measured_copy_gbs']:.0f}% | {launches.get(mode, 0):.2f} |")
    if torch:
        for mode in ("eager", "cuda_graph"):
            entry = torch.get(mode) or {}
            if "median_ms" in entry:
                gbs = bench["step_bytes"] / (entry["median_ms"] * 1e-3) / 1e9
                print(f"| pytorch {mode} | {entry['median_ms']:.4f} | {gbs:.0f} | {100*gbs/bench['measured_copy_gbs']:.0f}% | - |")
            else:
                print(f"| pytorch {mode} | unavailable: {entry.get('error', 'no result')[:80]} | | | |")
        best = min(bench.get("dataflow_step_ms") or 1e9, bench.get("resident_step_ms") or 1e9)
        graph = (torch.get("cuda_graph") or {}).get("median_ms")
        if graph:
            print(f"speed-up over PyTorch with CUDA graphs: {graph / best:.2f}x (goal 1.3x); goal 0.60 ms per step: "
                  f"{'met' if best <= 0.60 else 'not met'} ({best:.3f} ms)")
    if unsplit and unsplit.get("dataflow_step_ms"):
        ms = unsplit["dataflow_step_ms"]
        print(f"| tilefire dataflow, --kv-splits 1 | {ms:.4f} | {unsplit['step_bytes'] / (ms * 1e-3) / 1e9:.0f} | - | - |")
    print(f"bsp / dataflow: {bench['bsp_over_dataflow']:.3f}; resident / dataflow: {bench.get('resident_over_dataflow', 0):.3f}")
if trace:
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    if slices:
        span = max(e["ts"] + e["dur"] for e in slices) - min(e["ts"] for e in slices)
        rows = len({e["tid"] for e in slices})
        busy = sum(e["dur"] for e in slices) / (span * rows) if span > 0 else 0
        by_op = {}
        for e in slices:
            by_op[e["cat"]] = by_op.get(e["cat"], 0) + e["dur"]
        top = ", ".join(f"{op} {us:.0f} us" for op, us in sorted(by_op.items(), key=lambda kv: -kv[1])[:4])
        print(f"traced decode step: {span:.1f} us over {rows} CTAs, busy {100 * busy:.0f}%; task time by op: {top}")
if fit and "fit" in fit:
    f = fit["fit"]
    print(f"h200 model: preset predicts {fit['step_ms']:.4f} ms ({fit['memory_gbs']:.0f} GB/s, {fit['dispatch_ns']:.0f} ns per task, "
          f"{fit['signal_ns']:.0f} ns per signal); traced {f['traced_step_ms']:.4f} ms; fitted {f['memory_gbs']:.0f} GB/s, "
          f"{f['dispatch_ns']:.0f} ns per task ({f['dispatch_samples']} gaps), {f['signal_ns']:.0f} ns per signal "
          f"({f['signal_samples']} waits) predict {f['fitted_step_ms']:.4f} ms")
cpu_tp2, cpu_tp1, cpu_trace = load("cpu_tp2.json"), load("cpu_tp1.json"), load("cpu_tp2_bsp_trace.json")
if cpu_tp2 and cpu_tp1 and cpu_trace:
    # The collectives' time in rank 0's bsp step: per collective node, first start to last end.
    spans = {}
    for e in cpu_trace["traceEvents"]:
        if e.get("ph") == "X" and e["cat"] in ("allreduce_residual", "allgather_logits"):
            first, last = spans.get(e["args"]["node"], (float("inf"), 0.0))
            spans[e["args"]["node"]] = (min(first, e["ts"]), max(last, e["ts"] + e["dur"]))
    collective_ms = sum(last - first for first, last in spans.values()) / 1000
    # From the median of the rounds' ratios, as bench's bsp / dataflow (the medians' difference is noisier).
    gained_ms = cpu_tp2["dataflow_step_ms"] * (cpu_tp2["bsp_over_dataflow"] - 1)
    print(f"cpu tensor parallelism ({cpu_tp2['threads']} threads; small, bf16): tp=2 dataflow {cpu_tp2['dataflow_step_ms']:.3f} ms, "
          f"bsp {cpu_tp2['bsp_step_ms']:.3f} ms (bsp / dataflow {cpu_tp2['bsp_over_dataflow']:.3f}); tp=1 {cpu_tp2['tp1_step_ms']:.3f} ms "
          f"(tp1 / tp2 {cpu_tp2['tp1_over_tp']:.3f}), its bsp / dataflow {cpu_tp1['bsp_over_dataflow']:.3f}; collectives in a traced "
          f"tp=2 bsp step {collective_ms:.3f} ms over {len(spans)} nodes; dataflow's gain over bsp {gained_ms:.3f} ms = "
          f"{100 * gained_ms / collective_ms if collective_ms > 0 else 0:.0f}% of it")
if tp2:
    print(f"tp=2 as virtual ranks on this GPU: {tp2['dataflow_step_ms']:.4f} ms per step (bsp / dataflow {tp2['bsp_over_dataflow']:.3f}); "
          f"tp=1 in the same rounds: {tp2['tp1_step_ms']:.4f} ms")
PY
