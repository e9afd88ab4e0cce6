#!/usr/bin/env bash
# The lab's default experiment: seed 001's 2 Mbit/s testbed (A, B, D calling through
# relay C), G.729 with voice activity; capacity with aggregation off, hop-by-hop,
# end-to-end and hold-while-busy, on the ns-3 air (ns-3's 802.11 model; setup.sh
# installs libns3-dev and g++, the lab compiles its ns-3 program on first use;
# `--air tc` for the fast HTB air). Needs root (network namespaces). Extra arguments
# go to `airpack lab run` (see `airpack lab run --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked -p airpack
exec target/release/airpack lab run "$@"
