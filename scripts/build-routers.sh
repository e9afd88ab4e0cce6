#!/usr/bin/env bash
# Static, stripped, daemon-only `airpack` binaries for the router targets
# OpenWrt uses most (musl libc, no lab: `--no-default-features`):
#   bash scripts/build-routers.sh                  # every target below
#   bash scripts/build-routers.sh aarch64-unknown-linux-musl ...
#   bash scripts/build-routers.sh --qemu-test      # also: airpack-core's tests
#                                                  # for aarch64 under qemu-user
# Output: target/routers/out/airpack-TARGET, plus a sizes table on stdout.
# About 7 minutes per target on a 2-core machine (the standard library too).
#
# How (rustup cannot download other targets' standard libraries here): Debian
# bookworm's own Rust (rustc-web, cargo-web, rust-web-src: 1.96) builds the
# standard library from its source for each target (-Zbuild-std, through
# RUSTC_BOOTSTRAP=1 on the stable compiler), and Zig (PyPI `ziglang`, driven
# by `cargo-zigbuild`) links it against the musl libc Zig ships for every
# architecture. Installs what it needs (root: apt-get, pip); idempotent.
# Uses one build job (CARGO_BUILD_JOBS overrides) and its own target dir
# (TARGET_DIR, default target/routers).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(
  aarch64-unknown-linux-musl
  armv7-unknown-linux-musleabihf
  x86_64-unknown-linux-musl
  mips-unknown-linux-musl
  mipsel-unknown-linux-musl
)
QEMU_TEST=0
targets=()
for a in "$@"; do
  case "$a" in
    --qemu-test) QEMU_TEST=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) targets+=("$a") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")

# --- toolchain ---------------------------------------------------------------
apt_pkgs=(rustc-web cargo-web rust-web-src)
[ "$QEMU_TEST" = 1 ] && apt_pkgs+=(qemu-user)
need=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "build-routers: installing ${need[*]} (Debian)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! python3 -c 'import ziglang' 2>/dev/null || ! command -v cargo-zigbuild >/dev/null; then
  echo "build-routers: installing ziglang and cargo-zigbuild (PyPI)"
  python3 -m pip install -q ziglang==0.17.1 cargo-zigbuild==0.24.0
  hash -r
fi

# Debian's compiler (not a rustup proxy), and its standard library source
# where -Zbuild-std looks for it: $(rustc --print sysroot)/lib/rustlib/src/rust.
export PATH="/usr/bin:$PATH"
RUSTC=/usr/bin/rustc
rust_ver=$("$RUSTC" -V | awk '{print $2}')
sysroot=$("$RUSTC" --print sysroot)
src="$sysroot/lib/rustlib/src/rust"
if [ ! -e "$src/library/std/Cargo.toml" ]; then
  [ -e "/usr/src/rustc-$rust_ver/library/std/Cargo.toml" ] || {
    echo "build-routers: no standard library source for rustc $rust_ver (rust-web-src)" >&2
    exit 1
  }
  mkdir -p "$(dirname "$src")"
  ln -sfn "/usr/src/rustc-$rust_ver" "$src"
fi

export RUSTC RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
export CARGO_PROFILE_RELEASE_PANIC=abort
# One codegen unit and full LTO: 11 % smaller than the workspace's thin LTO
# over 4 units (docs/performance.md); optimisation level unchanged (3).
export CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
TARGET_DIR=${TARGET_DIR:-target/routers}
OUT=$TARGET_DIR/out
mkdir -p "$OUT"

# Zig's linker brings the C runtime (crt1.o, libc.a): tell rustc not to
# look for its own self-contained copies, which a built-from-source std lacks.
# The io-uring crate ships kernel bindings generated on 64-bit targets only
# and refuses others; its structures are the kernel's fixed-width uapi ones
# (__u32/__u64, and u64 is 8-byte aligned on ARM EABI and MIPS o32 as on
# x86_64), so 32-bit targets use them with io-uring's own opt-out.
target_env() {
  local t=${1^^} flags="-C link-self-contained=no"
  t=${t//-/_}
  case "$1" in
    x86_64-*|aarch64-*) ;;
    *) flags+=" --cfg io_uring_skip_arch_check" ;;
  esac
  # MIPS: a static PIE (the target's default) crashes at startup under
  # qemu-mips (`run --check`: SIGSEGV); a non-PIE static binary does not.
  case "$1" in
    mips*) flags+=" -C relocation-model=static" ;;
  esac
  echo "CARGO_TARGET_${t}_RUSTFLAGS=$flags"
}

# --- builds ------------------------------------------------------------------
declare -A result
for t in "${targets[@]}"; do
  echo "build-routers: $t"
  log="$TARGET_DIR/build-$t.log"
  # std's `backtrace-trace-only`: a panic with RUST_BACKTRACE set prints frame
  # addresses (resolve them with an unstripped build and addr2line), where
  # the symbolizer found nothing to name in a stripped binary. It saves only
  # 2 KB: std::backtrace::Backtrace (anyhow captures one) still links the
  # symbolizer (docs/performance.md).
  if env "$(target_env "$t")" cargo-zigbuild build --locked -p airpack --release \
      --no-default-features --target "$t" -Zbuild-std=std,panic_abort \
      -Zbuild-std-features=backtrace,backtrace-trace-only,panic-unwind \
      --target-dir "$TARGET_DIR" >"$log" 2>&1; then
    cp "$TARGET_DIR/$t/release/airpack" "$OUT/airpack-$t"
    result[$t]="$(stat -c %s "$OUT/airpack-$t") bytes"
  else
    result[$t]="FAILED (log: $log)"
    grep -E "^error" "$log" | head -5 >&2 || true
  fi
done

if [ "$QEMU_TEST" = 1 ]; then
  t=aarch64-unknown-linux-musl
  echo "build-routers: airpack-core's tests for $t under qemu-aarch64"
  # Tests unwind (the test profile ignores panic=abort): the full std set.
  env "$(target_env "$t")" CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER=qemu-aarch64 \
    cargo-zigbuild test --locked -p airpack-core --target "$t" -Zbuild-std \
    --target-dir "$TARGET_DIR"
fi

echo
echo "target                            stripped size"
for t in "${targets[@]}"; do
  printf '%-33s %s\n' "$t" "${result[$t]}"
done
for t in "${targets[@]}"; do
  case "${result[$t]}" in FAILED*) exit 1 ;; esac
done
