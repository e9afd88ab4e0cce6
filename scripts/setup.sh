#!/usr/bin/env bash
# Installs what airpack's build, tests and lab need on a fresh Debian machine.
# Idempotent: does nothing that is already done. Needs root for apt-get.
set -euo pipefail

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have nft      || need_pkgs+=(nftables)
have ip       || need_pkgs+=(iproute2)
have tc       || need_pkgs+=(iproute2)
have valgrind || need_pkgs+=(valgrind)
have tshark   || need_pkgs+=(tshark)
have babeld   || need_pkgs+=(babeld)
have chrt     || need_pkgs+=(util-linux)
# real SIP phones for the lab (airpack lab point --client baresip)
have baresip  || need_pkgs+=(baresip-core)
# the OpenWrt init script's check (crates/airpack/tests/packaging.rs)
have shellcheck || need_pkgs+=(shellcheck)
# `systemd-analyze verify` of dist/systemd/airpack.service (packaging.rs)
have systemd-analyze || need_pkgs+=(systemd)
# the lab's ns-3 air (airpack lab run --air ns3): Debian's ns-3 and a C++
# compiler; the lab compiles crates/lab/ns3/air.cc into target/ns3/ on first use
have g++        || need_pkgs+=(g++)
have pkg-config || need_pkgs+=(pkg-config)
dpkg -s libns3-dev >/dev/null 2>&1 || need_pkgs+=(libns3-dev)
# jemalloc for the ns-3 air (ns-3 allocates per event; linked when present)
dpkg -s libjemalloc2 >/dev/null 2>&1 || need_pkgs+=(libjemalloc2)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_pkgs+=(fonts-dejavu-core)
# the /metrics test parses the daemon's output with Prometheus' Python client
# (crates/airpack/tests/daemon_metrics.rs; Debian's package, for /usr/bin/python3)
py_has() { for py in /usr/bin/python3 python3; do "$py" -c "import $1" >/dev/null 2>&1 && return 0; done; return 1; }
py_has prometheus_client || need_pkgs+=(python3-prometheus-client)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${need_pkgs[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${need_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

have cargo || { echo "setup: cargo (Rust) is required" >&2; exit 1; }
echo "setup: prerequisites present" >&2
