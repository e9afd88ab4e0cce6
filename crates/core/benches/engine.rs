//! Criterion benchmark: packets/s and ns/packet through classify + bundle +
//! split for 60-byte UDP packets with 1, 16 and 1024 peers (see
//! `benches/common/mod.rs`). Results and commands: docs/performance.md.
//!
//! Run: `cargo bench -p airpack-core --bench engine`

mod common;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const BATCH: usize = 10_000;

fn classify_bundle_split(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify_bundle_split_60B");
    g.throughput(Throughput::Elements(BATCH as u64));
    for peers in [1usize, 16, 1024] {
        let mut w = common::Workload::new(peers);
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{peers}_peers")),
            &peers,
            |b, _| b.iter(|| black_box(w.run(BATCH))),
        );
    }
    g.finish();
}

criterion_group!(benches, classify_bundle_split);
criterion_main!(benches);
