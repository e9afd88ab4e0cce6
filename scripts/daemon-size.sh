#!/usr/bin/env bash
# Where the daemon-only binary's bytes go (docs/performance.md, "Daemon binary size"):
#   bash scripts/daemon-size.sh        # stripped size, then the 30 biggest contributors
#   bash scripts/daemon-size.sh 60     # the 60 biggest
# Builds `-p airpack --no-default-features` as the documented measurement does
# (release, full LTO, one codegen unit, panic=abort, opt-level 3, no debug info)
# but unstripped and with v0 symbol mangling, so that every generic instance
# names its type parameters; prints the size of a stripped copy (v0 mangling
# moves it by about 0.2 % against the documented command) and sums the text
# symbols (`nm --size-sort`) by crate, by module of airpack, and by kind for the
# usual suspects (serde per deserializer, slice sorts, regex, std's backtrace
# symbolizer). One build job, under nice; TARGET_DIR (default target/size2).
set -euo pipefail
cd "$(dirname "$0")/.."
top=${1:-30}
td=${TARGET_DIR:-target/size2}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} CARGO_INCREMENTAL=0
export CARGO_PROFILE_RELEASE_PANIC=abort CARGO_PROFILE_RELEASE_DEBUG=0
export CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
export CARGO_PROFILE_RELEASE_STRIP=none
RUSTFLAGS="${RUSTFLAGS:-} -C symbol-mangling-version=v0" \
  nice -n 19 cargo build -q -p airpack --release --no-default-features --target-dir "$td"
bin=$td/release/airpack
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip -o "$tmp/stripped" "$bin"
echo "stripped size: $(stat -c %s "$tmp/stripped") bytes (commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', modified'))"
nm -S --size-sort -C "$bin" | awk '$3 ~ /^[tTwW]$/' >"$tmp/nm"
python3 - "$tmp/nm" "$top" <<'EOF'
import collections, re, sys

def kind(n):
    if "slice::sort" in n:
        return "core::slice::sort (all element types)"
    if re.search(r"serde[_a-z]*::de|Deserializ|Visitor", n):
        if "toml::value" in n:
            return "serde de: from toml::Value"
        if "toml_edit" in n or "toml::de" in n:
            return "serde de: toml text (toml_edit)"
        if "serde_json" in n:
            return "serde de: json"
        return "serde de: other"
    if re.search(r"serde[_a-z]*::ser|Serializ", n):
        return "serde ser: toml" if "toml" in n else ("serde ser: json" if "serde_json" in n else "serde ser: other")
    if "regex" in n:
        return "regex"
    if re.search(r"gimli|addr2line|rustc_demangle|miniz_oxide|backtrace", n):
        return "std backtrace symbolizer"
    m = re.match(r"^[<&*\[]*(?:dyn |mut )?([A-Za-z_]\w*)::(\w+)(?:::(\w+))?(?:::(\w+))?", n)
    if not m:
        return "other"
    c = m.group(1)
    if c == "airpack":
        return "airpack::" + "::".join(x for x in m.group(2, 3, 4) if x and x[0].islower())
    if c in ("core", "alloc", "std"):
        return c + "::" + m.group(2)
    return c

size = collections.Counter()
count = collections.Counter()
for line in open(sys.argv[1]):
    _, sz, _, name = line.rstrip("\n").split(" ", 3)
    k = kind(name)
    size[k] += int(sz, 16)
    count[k] += 1
print(f"text symbols: {sum(size.values())} bytes; biggest contributors:")
print(f"{'bytes':>9} {'symbols':>7}  what")
for k, s in size.most_common(int(sys.argv[2])):
    print(f"{s:9d} {count[k]:7d}  {k}")
EOF
