#!/usr/bin/env bash
# Runs every fuzz target for N seconds each (default 60) and fails on the first
# crash. Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Usage: [FUZZ_SEED=n] fuzz/run.sh [seconds] [target...]
set -euo pipefail
cd "$(dirname "$0")"
# An empty CARGO_TARGET_DIR makes cargo fail; treat it as unset.
[ -n "${CARGO_TARGET_DIR:-}" ] || unset CARGO_TARGET_DIR
secs="${1:-60}"
# A fixed seed makes a run reproducible: CI explores the same input sequence on
# every run (a slower machine only stops earlier in it), so a crash CI can find
# is found first by a longer local run with the same seed. FUZZ_SEED=0 lets
# libFuzzer pick a random seed, for exploration.
seed="${FUZZ_SEED:-1}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(ip_inspect decode_native decode_kau decode_simplemux rtp_parse decode_downlink_seed decode_downlink_compact decode_register rtcp_parse tcp_parse tim_packets decode_hello sealed_open netlink_radio)
fi
# cargo-fuzz needs nightly rustc flags: use the nightly toolchain when rustup has
# it, else the stable one with RUSTC_BOOTSTRAP=1 (same flags, no download needed).
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  tc=(+nightly)
else
  tc=(); export RUSTC_BOOTSTRAP=1
  echo "fuzz/run.sh: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1" >&2
fi
if ! cargo "${tc[@]}" fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked --quiet
fi
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  # Seed the bundle corpora with the golden vectors' payloads.
  case "$t" in
    decode_native|decode_kau|decode_simplemux)
      enc="${t#decode_}"
      python3 - "$enc" "corpus/$t" <<'PY' || true
import sys, glob, os
enc, out = sys.argv[1], sys.argv[2]
for f in glob.glob(os.path.join("..", "crates", "core", "tests", "vectors", "*.hex")):
    text = open(f).read()
    if "encoding: %s" % enc not in text:
        continue
    payload, on = bytearray(), False
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        if line.endswith(":") or ": " in line:
            on = line == "payload:"
            continue
        if on:
            payload += bytes(int(t, 16) for t in line.split())
    open(os.path.join(out, os.path.basename(f) + ".bin"), "wb").write(payload)
PY
      ;;
    decode_downlink_seed|decode_downlink_compact|decode_register)
      # Seed the downlink corpora with the downlink golden vectors' frames / messages.
      python3 - "$t" "corpus/$t" <<'PY' || true
import sys, glob, os
t, out = sys.argv[1], sys.argv[2]
fmt = {"decode_downlink_seed": "seed", "decode_downlink_compact": "compact", "decode_register": "register"}[t]
for f in glob.glob(os.path.join("..", "crates", "core", "tests", "vectors", "downlink", "*.hex")):
    text = open(f).read()
    if "format: %s" % fmt not in text:
        continue
    data, on = bytearray(), False
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        if line.endswith(":") or ": " in line:
            on = line in ("frame:", "message:")
            continue
        if on:
            data += bytes(int(x, 16) for x in line.split())
    open(os.path.join(out, os.path.basename(f) + ".bin"), "wb").write(data)
PY
      ;;
    decode_hello)
      # Seed with the hello golden vectors' bytes.
      python3 - "corpus/$t" <<'PY' || true
import sys, glob, os
out = sys.argv[1]
for f in glob.glob(os.path.join("..", "crates", "core", "tests", "vectors", "hello", "*.hex")):
    b, on = bytearray(), False
    for line in open(f).read().splitlines():
        line = line.split("#")[0].strip()
        if line == "hello:":
            on = True
        elif on and line:
            b += bytes(int(t, 16) for t in line.split())
    open(os.path.join(out, os.path.basename(f) + ".bin"), "wb").write(b)
PY
      ;;
  esac
  # Inputs that once failed (fuzz/regressions/<target>/, committed) run first, every time.
  dirs=("corpus/$t")
  [ -d "regressions/$t" ] && dirs+=("regressions/$t")
  echo "== fuzzing $t for ${secs}s (seed $seed)"
  # -rss_limit_mb bounds memory; libFuzzer exits non-zero on a crash, leak or timeout.
  cargo "${tc[@]}" fuzz run "$t" "${dirs[@]}" -- -seed="$seed" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10
done
echo "fuzz/run.sh: all targets ran ${secs}s without a crash"
