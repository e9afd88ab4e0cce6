//! Deterministic cost per packet for callgrind: pushes N 60-byte packets
//! through classify + bundle + split (the criterion workload in
//! `benches/common/mod.rs`) after a warm-up, with P peers.
//!
//! Usage: `bench_count PEERS N`. Instructions per packet are the difference
//! between two runs with different N divided by the difference in N (so setup
//! and warm-up cancel out); see docs/performance.md for the exact commands.

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let mut args = std::env::args().skip(1);
    let peers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mut w = common::Workload::new(peers);
    let got = w.run(n);
    let c = &w.engine.stats().counters;
    println!(
        "peers {peers} packets {n} split {got} bundles {} avg_aggregation {:.1}",
        c.bundles,
        c.average_aggregation()
    );
}
