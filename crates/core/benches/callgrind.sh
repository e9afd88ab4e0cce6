#!/bin/sh
# Deterministic instructions per packet through classify + bundle + split
# (examples/bench_count.rs, the criterion workload), with 1, 16 and 1024 peers.
# Two callgrind runs per peer count; setup and warm-up cancel out in the
# difference. Usage (from the repository root): crates/core/benches/callgrind.sh
set -eu
cargo build --quiet --release -p airpack-core --example bench_count
B="${CARGO_TARGET_DIR:-target}/release/examples/bench_count"
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$B" "$1" "$2" 2>&1 | sed -n 's/.*Collected : //p'
}
for p in ${PEERS:-1 16 1024}; do
    a=$(count "$p" 100000)
    b=$(count "$p" 300000)
    echo "$p peers: $(( (b - a) / 200000 )) instructions/packet"
done
