//! No allocation per packet in steady state: after a warm-up, pushing packets
//! through classify + queue + bundle + poll (+ the receiver's split) must not
//! call the allocator at all. Measured with a counting global allocator that
//! counts per thread (libtest's own threads allocate while the test runs: a
//! process-wide count failed 12 of 40 direct runs of this binary), so this
//! test binary holds only this test.

#[path = "../benches/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // const-initialised, no destructor: reading it never allocates
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    ALLOCS.with(|c| c.set(c.get() + 1));
}

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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
