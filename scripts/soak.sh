#!/usr/bin/env bash
# Runs the test suite N times in a row while a CPU-heavy job loads the machine,
# to show the suite does not depend on scheduling luck (issue 9, point 12).
#   bash scripts/soak.sh [RUNS]       RUNS defaults to 10
#   LOAD=build (default): a release build of the workspace in a loop, in its
#     own target directory (target/soak-load), niced like any other job;
#   LOAD=spin: two busy loops. Both stop with this script.
#   FUZZ_SECONDS (default 0 here: the fuzz run is bounded random input, not a
#     timing question; set it to include it).
# Prints one line per run and a closing 'N passed, N failed' line; the logs of
# failed runs stay in target/soak/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
load=${LOAD:-build}
export FUZZ_SECONDS=${FUZZ_SECONDS:-0}
mkdir -p target/soak
bash scripts/setup.sh

load_pids=()
stop_load() {
  for p in "${load_pids[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
}
trap stop_load EXIT
start_load() {
  case "$load" in
    build)
      # A fresh release build each round (clean, then build), bounded by the script's life.
      setsid bash -c 'while :; do cargo clean --release --target-dir target/soak-load -q 2>/dev/null || true;
                      cargo build --release --workspace --target-dir target/soak-load -q >/dev/null 2>&1 || sleep 5; done' &
      load_pids+=($!) ;;
    spin)
      for _ in 1 2; do setsid bash -c 'while :; do :; done' & load_pids+=($!); done ;;
    none) ;;
    *) echo "soak: LOAD must be build, spin or none" >&2; exit 2 ;;
  esac
}
start_load

passed=0; failed=0
for i in $(seq 1 "$runs"); do
  log="target/soak/run-$i.log"
  start=$(date +%s)
  if bash scripts/test.sh >"$log" 2>&1; then
    passed=$((passed + 1)); verdict=ok; rm -f "$log"
  else
    failed=$((failed + 1)); verdict="FAILED (log: $log)"
  fi
  echo "soak: run $i/$runs: $verdict in $(( $(date +%s) - start )) s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "soak: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
