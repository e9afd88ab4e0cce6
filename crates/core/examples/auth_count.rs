//! Deterministic cost of authenticating one bundle, for callgrind: N times,
//! the sender's tag over (domain label, 8-byte sequence number, LEN-byte
//! bundle) and the receiver's verify over the same bytes plus its replay
//! window update, as a bundle MAC would be used (`airpack_core::auth`).
//!
//! Usage: `auth_count LEN N`. Instructions per bundle are the difference
//! between two runs with different N divided by the difference in N (setup
//! cancels out); the command is in docs/performance.md ("Authentication").

use airpack_core::auth::{tag, verify, Domain, Key, ReplayWindow};
use std::hint::black_box;

fn main() {
    let mut args = std::env::args().skip(1);
    let len: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let key = Key::from_bytes(*b"0123456789abcdef");
    let bundle: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
    let mut window = ReplayWindow::<16>::new();
    let mut ok = 0u64;
    for seq in 0..n {
        let s = seq.to_be_bytes();
        // Sender.
        let t = tag(black_box(&key), &[Domain::BUNDLE, &s, black_box(&bundle)]);
        // Receiver.
        let t = black_box(t);
        if verify(
            black_box(&key),
            &[Domain::BUNDLE, &s, black_box(&bundle)],
            &t,
        ) && window.check_and_update(black_box(seq)).is_ok()
        {
            ok += 1;
        }
    }
    assert_eq!(ok, n);
    println!("{n} bundles of {len} bytes tagged and verified");
}
