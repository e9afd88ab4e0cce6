#!/usr/bin/env bash
# The whole test suite: unit, property, golden-vector and root integration tests
# (network namespaces, TUN, nftables, qdiscs), then a bounded fuzz run per parser.
#   FUZZ_SECONDS=60 (per target; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

if [ "$(id -u)" -ne 0 ]; then
  echo "test: NOTE: not root: integration tests that need root will print SKIP" >&2
fi

# Debug build with optimisation for the timing-sensitive integration tests.
export CARGO_PROFILE_TEST_OPT_LEVEL=${CARGO_PROFILE_TEST_OPT_LEVEL:-1}
export CARGO_PROFILE_DEV_OPT_LEVEL=${CARGO_PROFILE_DEV_OPT_LEVEL:-1}
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads="${TEST_THREADS:-2}"

fuzz_seconds=${FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" -gt 0 ] && [ -x fuzz/run.sh ]; then
  fuzz/run.sh "$fuzz_seconds"
fi
echo "test: all done" >&2
