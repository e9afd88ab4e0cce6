//! `auth` and the neighbour table allocate nothing once built: tagging,
//! verifying and the replay window, and a table receiving, expiring, writing
//! hellos and reporting events (with a key, two neighbours, one coming and
//! going). Measured with a counting global allocator (per thread), so this
//! test binary holds only this test.

use airpack_core::auth::{tag, verify, Domain, Key, ReplayWindow};
use airpack_core::neighbor::hello::{Encodings, HelloHeader, HelloWriter, NeighborEntry};
use airpack_core::neighbor::table::{Config, Table};
mod alloc_counter;
use alloc_counter::allocs;
use std::net::IpAddr;

/// A keyed hello from `sender` listing node 1 into `buf`; returns its length.
fn hello(buf: &mut [u8], key: &Key, sender: u64, seq: u64, us: IpAddr) -> usize {
    let h = HelloHeader {
        sender,
        seq,
        interval_ms: 1000,
        encodings: Encodings(7),
    };
    let mut w = HelloWriter::new(buf, &h, Some((1, key))).unwrap();
    w.push(&NeighborEntry {
        id: 1,
        addr: us,
        rx_ratio: 255,
        max_bundle: 1500,
        radio: None,
    })
    .unwrap();
    w.finish()
}

#[test]
fn auth_and_table_do_not_allocate() {
    let key = Key::from_bytes([7; 16]);
    let mut cfg = Config::new(1);
    cfg.auth = Some((1, key.clone()));
    let mut t = Table::new(cfg, 1000);
    let mut window = ReplayWindow::<16>::new();
    let (b, c): (IpAddr, IpAddr) = ("10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
    let us: IpAddr = "10.0.0.1".parse().unwrap();
    let mut rx = [0u8; 1500];
    let mut tx = [0u8; 1500];
    let bundle = [0x5au8; 300];
    let before = allocs();
    let mut ups = 0;
    for s in 0..2000u64 {
        let now = s * 500_000;
        let n = hello(&mut rx, &key, 2, s, us);
        t.handle_hello(now, b, &rx[..n]).unwrap();
        if s % 20 < 10 {
            // C comes and goes (down after 3 s of silence, up again).
            let n = hello(&mut rx, &key, 3, s, us);
            t.handle_hello(now, c, &rx[..n]).unwrap();
        }
        t.handle_timeout(now);
        if t.poll_timeout() <= now {
            t.poll_hello(now, s as u32, &mut tx);
        }
        t.poll_hello(now, s as u32, &mut tx);
        while let Some(ev) = t.poll_event() {
            if matches!(ev, airpack_core::neighbor::table::Event::Up(_)) {
                ups += 1;
            }
        }
        let seq = s.to_be_bytes();
        let tg = tag(&key, &[Domain::BUNDLE, &seq, &bundle]);
        assert!(verify(&key, &[Domain::BUNDLE, &seq, &bundle], &tg));
        window.check_and_update(s).unwrap();
    }
    let after = allocs();
    assert!(ups > 50, "C really came and went: {ups} ups");
    assert_eq!(t.stats().sent, 1000, "a hello every second");
    assert_eq!(after - before, 0, "{} allocations", after - before);
}
