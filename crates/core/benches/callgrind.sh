#!/bin/sh
# Deterministic instructions per packet through classify + bundle + split
# (examples/bench_count.rs, the criterion workload), with 1, 16 and 1024 peers.
#
# Two callgrind runs per peer count (100 000 and 300 000 packets); setup and
# warm-up cancel out in the difference, divided by 200 000. Everything the
# benchmark loop executes per packet is counted in the total, the loop's own
# work included (picking the packet and peer, calling the engine, draining
# poll_transmit, iterating the split packets). The breakdown splits the total
# by where the instructions run (inclusive callgrind costs of the engine and
# decoder functions that are not inlined into the loop):
#   bundle   = Engine::next_bundle (serve the ready peer, write the bundle)
#   receiver = native::decode (split + validate every inner packet)
#   sender + loop = the rest: Engine::handle_packet (inspect, classify, queue;
#              `#[inline]`, so it runs inside the benchmark loop, as in the
#              daemon's), the benchmark loop itself, poll_transmit's inlined
#              "nothing to send" check and its out-of-line part around
#              next_bundle (deadline and ready-heap upkeep), and iterating
#              the split packets.
#
# Usage (from the repository root): crates/core/benches/callgrind.sh
# PEERS="1 16" to choose peer counts.
set -eu
cargo build --quiet --release -p airpack-core --example bench_count
B="${CARGO_TARGET_DIR:-target}/release/examples/bench_count"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# Prints: total next_bundle decode (instructions, whole run). The two are
# the inclusive costs of all calls to those functions, summed from the
# callgrind output's call records (cfn= / calls= / cost line).
count() {
    valgrind --tool=callgrind --callgrind-out-file="$T/out" "$B" "$1" "$2" >/dev/null 2>&1
    awk '
        /^summary:/ { total = $2 }
        /^c?fn=/ {
            id = $1; sub(/^c?fn=/, "", id)
            if (NF > 1) { name = $0; sub(/^[^ ]* /, "", name); names[id] = name }
            if ($1 ~ /^cfn=/) callee = names[id]
        }
        /^calls=/ { grab = 1; next }
        grab { incl[callee] += $NF; grab = 0 }
        END {
            for (f in incl) {
                if (f ~ /Engine>?::next_bundle$/) nb += incl[f]
                if (f ~ /wire::native::decode$/) dc += incl[f]
            }
            print total, nb + 0, dc + 0
        }' "$T/out"
}
for p in ${PEERS:-1 16 1024}; do
    a=$(count "$p" 100000)
    b=$(count "$p" 300000)
    echo "$a $b" | awk -v p="$p" '{
        t = ($4 - $1) / 200000; n = ($5 - $2) / 200000; d = ($6 - $3) / 200000
        printf "%s peers: %d instructions/packet (bundle %.0f, receiver %.0f, sender + loop %.0f)\n",
            p, t, n, d, t - n - d }'
done
