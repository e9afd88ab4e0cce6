#!/usr/bin/env bash
# airpack against Simplemux (issue 13 point 3), as root, from the repository root:
#
#   bash crates/airpack/benches/simplemux.sh            # 5 alternated rounds
#   AIRPACK_BENCH_RUNS=9 bash crates/airpack/benches/simplemux.sh
#
# Builds Simplemux (normal flavour; network mode at run time) from its public
# source into target/simplemux/ (not committed): SIMPLEMUX_SRC is a checkout
# or a git URL (default https://github.com/Simplemux/simplemux). Debug
# output, log files, assertions and ROHC are compiled out, as its build guide
# recommends for speed. Then runs `bench_vs_simplemux` (daemon_bench.rs):
# the kernel alone, airpack and Simplemux alternated in the same namespaces
# with the same generator and receiver; packets/s and CPU per packet, medians.
set -euo pipefail
cd "$(dirname "$0")/../../.."
src=${SIMPLEMUX_SRC:-https://github.com/Simplemux/simplemux}
out=target/simplemux
mkdir -p "$out"
if [ ! -x "$out/simplemux" ]; then
    rm -rf "$out/src"
    if [ -d "$src" ]; then
        cp -r "$src/src" "$out/src"
    else
        git clone --depth 1 "$src" "$out/checkout"
        cp -r "$out/checkout/src" "$out/src"
    fi
    sed -i -E 's@^#define (DEBUG|LOGFILE|ASSERT|USINGROHC) 1@// &@' "$out/src/commonFunctions.h"
    grep -qE '^#define (DEBUG|LOGFILE|ASSERT|USINGROHC) 1' "$out/src/commonFunctions.h" &&
        { echo "could not compile out Simplemux's debug options" >&2; exit 1; }
    gcc -O2 -w -o "$out/simplemux" "$out"/src/*.c -lm
fi
SIMPLEMUX_BIN=$PWD/$out/simplemux \
    cargo test --release -p airpack --test daemon_bench bench_vs_simplemux -- \
    --ignored --nocapture --test-threads=1
