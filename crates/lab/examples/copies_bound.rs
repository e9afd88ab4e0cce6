//! The downlink multiplexing bound when every frame is sent N times
//! (`ap.frame_copies`, `cell-sim --frame-copies`; docs/results.md, "Frame
//! copies in every configuration"): `cargo run -p airpack-lab --example
//! copies_bound`.
//!
//! Same model as [`airpack_lab::downlink_bound`] (compact layout, packed
//! frames, uplink unchanged, mean backoff, no collisions), with the
//! interval's multicast airtime charged N times: the largest `n` with
//! `n·T(L) + N·downlink(n) ≤ 20 ms`. The last columns say what the daemon's
//! airtime rule (`airpack_core::downlink::mux`, per frame) does with a full
//! frame when N copies are configured: it sends the most copies up to N
//! that still cost less than the frame's packets as unicast exchanges, and
//! sends the packets as unicast only when even one copy does not.
use airpack_lab::downlink_bound::{
    calls_unicast, downlink_us, multicast_us, Count, Layout, FRAME_LIMIT, G711, G729, UDP_IP,
};
use airpack_lab::medium::preset;

fn main() {
    let p = 20_000.0;
    println!("cell  mc  codec  unicast | mux, copies 1 2 3 4 | full frame: entries, one copy vs unicast (µs), copies sent for N = 1 2 3 4");
    for (name, rates) in [("b11", [2.0, 11.0]), ("g54", [6.0, 54.0])] {
        let cell = preset(name).expect("preset");
        for rate in rates {
            for codec in [G729, G711] {
                let l = Layout::Compact;
                let up = cell.exchange_us(codec.ip_bytes());
                let bound = |copies: u32| {
                    let mut n = 0u32;
                    while f64::from(n + 1) * up
                        + f64::from(copies)
                            * downlink_us(&cell, rate, &codec, l, Count::Packed, n + 1)
                        <= p
                    {
                        n += 1;
                    }
                    n
                };
                let k = (FRAME_LIMIT - l.frame_header()) / l.per_packet(&codec);
                let frame = multicast_us(
                    &cell,
                    rate,
                    UDP_IP + l.frame_header() + k * l.per_packet(&codec),
                );
                let uni = f64::from(k) * up;
                let rule: Vec<String> = (1..=4u32)
                    .map(
                        |n| match (1..=n).rev().find(|&c| f64::from(c) * frame < uni) {
                            Some(c) => format!("mux x{c}"),
                            None => "unicast".to_string(),
                        },
                    )
                    .collect();
                println!(
                    "{name}  {rate:>2}  {:<5}  {:>7} | {:>3} {:>3} {:>3} {:>3} | {k:>2} entries: {:.0} per copy vs {:.0} | {}",
                    codec.name,
                    calls_unicast(&cell, &codec, p),
                    bound(1),
                    bound(2),
                    bound(3),
                    bound(4),
                    frame,
                    uni,
                    rule.join(" ")
                );
            }
        }
    }
}
