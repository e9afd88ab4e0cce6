//! Deterministic cost of authenticating one bundle, for callgrind: N times,
//! the sender's `wire::sealed::seal` of a LEN-byte bundle (tag over domain
//! label, node, sequence number, bundle) and the receiver's `sealed::open`
//! plus its replay window update, as the daemon does with a mesh key.
//!
//! Usage: `auth_count LEN N`. Instructions per bundle are the difference
//! between two runs with different N divided by the difference in N (setup
//! cancels out); the command is in docs/performance.md ("Authentication").

use airpack_core::auth::{Key, ReplayWindow};
use airpack_core::wire::sealed;
use std::hint::black_box;

fn main() {
    let mut args = std::env::args().skip(1);
    let len: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let key = Key::from_bytes(*b"0123456789abcdef");
    let mut buf: Vec<u8> = (0..len + sealed::TRAILER_LEN)
        .map(|i| (i * 31) as u8)
        .collect();
    let mut window = ReplayWindow::<16>::new();
    let mut ok = 0u64;
    for seq in 0..n {
        // Sender.
        let m = sealed::seal(black_box(&key), 7, seq, black_box(&mut buf), len).unwrap();
        // Receiver.
        if let Ok(o) = sealed::open(black_box(&key), black_box(&buf[..m])) {
            if window.check_and_update(black_box(o.seq)).is_ok() {
                ok += 1;
            }
        }
    }
    assert_eq!(ok, n);
    println!("{n} bundles of {len} bytes tagged and verified");
}
