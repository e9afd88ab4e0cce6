//! No allocation per packet in steady state: after a warm-up, pushing packets
//! through classify + queue + bundle + poll (+ the receiver's split) must not
//! call the allocator at all. Measured with a counting global allocator that
//! counts per thread (libtest's own threads allocate while the test runs: a
//! process-wide count failed 12 of 40 direct runs of this binary), so this
//! test binary holds only this test.

#[path = "../benches/common/mod.rs"]
mod common;

mod alloc_counter;
use alloc_counter::allocs;

#[test]
fn steady_state_does_not_allocate() {
    for peers in [1usize, 16, 1024] {
        let mut w = common::Workload::new(peers); // includes a warm-up of 64 packets per peer
        w.run(peers * 64);
        let before = allocs();
        let split = w.run(200_000);
        let after = allocs();
        assert!(
            split > 150_000,
            "the workload really bundles and splits ({split})"
        );
        assert_eq!(
            after - before,
            0,
            "{peers} peers: {} allocations for 200000 packets",
            after - before
        );
        let c = &w.engine.stats().counters;
        assert!(
            c.average_aggregation() > 20.0,
            "bundles of ~23 packets: {}",
            c.average_aggregation()
        );
    }
}
