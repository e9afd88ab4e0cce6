//! Deterministic cost per packet for callgrind: pushes N 60-byte packets
//! through classify + bundle + split (the criterion workload in
//! `benches/common/mod.rs`) after a warm-up, with P peers.
//!
//! Usage: `bench_count PEERS N`. Instructions per packet are the difference
//! between two runs with different N divided by the difference in N (so setup
//! and warm-up cancel out); see docs/performance.md for the exact commands.
//!
//! It also prints the CPU time the run took (from `/proc/thread-self/schedstat`,
//! time actually on a CPU, so waiting for a busy machine's cores does not
//! count), as ns/packet and packets/s: a wall-clock-free speed figure.

#[path = "../benches/common/mod.rs"]
mod common;

/// Nanoseconds this thread has run on a CPU, if the kernel reports it.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let peers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mut w = common::Workload::new(peers);
    let t0 = cpu_ns();
    let got = w.run(n);
    let t1 = cpu_ns();
    let c = &w.engine.stats().counters;
    println!(
        "peers {peers} packets {n} split {got} bundles {} avg_aggregation {:.1}",
        c.bundles,
        c.average_aggregation()
    );
    if let (Some(a), Some(b)) = (t0, t1) {
        let ns = (b - a) as f64 / n.max(1) as f64;
        println!("cpu {:.1} ns/packet {:.2} M packets/s", ns, 1e3 / ns);
    }
}
