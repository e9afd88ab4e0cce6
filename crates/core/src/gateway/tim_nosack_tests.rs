//! The TCP Improvement Module with a sender WITHOUT SACK (issue 12 point 4,
//! point 5's "never a stalled connection"): a whole transfer through the
//! module between a model of a Reno sender and a cumulative-ACK receiver,
//! one segment lost in the mesh, window control on.
//!
//! A sender without SACK repairs a loss only by fast retransmit (the third
//! duplicate ACK that repeats the window, RFC 5681; Linux counts an ACK with
//! another window as a window update) or by its retransmission timeout; it
//! has no RACK and no tail loss probe. The model has no timer: when nothing
//! is in motion and the transfer is not done, the sender would wait for its
//! RTO (200 ms at least, doubling), which is the stall.

use super::tests::{client, identity, server, syn_opts, TS};
use super::*;
use crate::gateway::tcp::parse;
use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};

/// One transfer's outcome.
#[derive(Debug)]
struct Outcome {
    /// Bytes the server had acknowledged when nothing moved any more.
    acked: u32,
    /// The sender's fast retransmissions (shown when an assertion fails).
    #[allow(dead_code)]
    fast_retransmits: u32,
    /// Segments the mesh lost.
    lost: u32,
}

enum Ev {
    ToClient(Vec<u8>),
    ToServer(Vec<u8>),
}

/// A transfer of `segments` segments of `seg` bytes from the server to the
/// client through `tim`, the mesh losing the segment at byte offset
/// `drop_at` once and delaying the `reorder` segments before it until as
/// many after it went by (they overtake: seen in the netns test); every
/// packet takes `step_us`. The server offers SACK only if `sack`. Runs
/// until nothing moves.
#[allow(clippy::too_many_arguments)]
fn transfer(
    tim: &mut Tim,
    v4: bool,
    isn: u32,
    cws: Option<u8>,
    sack: bool,
    segments: u32,
    drop_at: u32,
    reorder: u32,
    share: u64,
) -> Outcome {
    let seg = 1388u32; // the client's MSS 1400 minus timestamps
    let step_us: Micros = 200;
    let total = segments * seg;
    let mut now: Micros = 0;
    let mut ev: VecDeque<Ev> = VecDeque::new();
    let pass = |tim: &mut Tim, dir, p: &mut Vec<u8>, now: &mut Micros, ev: &mut VecDeque<Ev>| {
        *now += step_us;
        let mut made = Vec::new();
        let v = tim.on_packet(dir, p, *now, share, |d, b| made.push((d, b.to_vec())));
        for (d, b) in made {
            ev.push_back(match d {
                Direction::IntoMesh => Ev::ToClient(b),
                Direction::FromMesh => Ev::ToServer(b),
            });
        }
        v
    };
    // Handshake: the client offers SACK (as Linux does), the server maybe not.
    let mut server_syn = syn_opts(1460, Some(7));
    if !sack {
        server_syn[4..6].copy_from_slice(&[1, 1]); // SACK-permitted -> NOPs
    }
    let mut p = client(v4, 100, 0, flags::SYN, 64_240, &syn_opts(1400, cws));
    pass(tim, Direction::FromMesh, &mut p, &mut now, &mut ev);
    let mut p = server(v4, isn, 101, flags::SYN | flags::ACK, &server_syn, 0);
    pass(tim, Direction::IntoMesh, &mut p, &mut now, &mut ev);
    let base = isn.wrapping_add(1);
    let shift = cws.unwrap_or(0);
    // About 1 MB offered by the client whatever its scale (no limit here).
    let offer = ((1u32 << 20) >> shift).clamp(1, 65_535) as u16;
    let mut p = client(v4, 101, base, flags::ACK, offer, &TS);
    pass(tim, Direction::FromMesh, &mut p, &mut now, &mut ev);
    let window = parse(&p).unwrap().window;

    // Sender (offsets from `base`) and receiver state.
    let (mut snd_una, mut snd_nxt) = (0u32, 0u32);
    let mut wnd = u32::from(window) << shift;
    let (mut last_window, mut dupacks, mut fast_retransmits) = (window, 0u32, 0u32);
    let (mut rcv_nxt, mut ooo) = (0u32, BTreeMap::<u32, u32>::new());
    let (mut dropped, mut lost) = (false, 0u32);
    let held: RefCell<Vec<Vec<u8>>> = RefCell::new(Vec::new());
    let held_from = drop_at.saturating_sub(reorder * seg);
    let release_at = drop_at + reorder * seg;
    let mut send = |tim: &mut Tim, off: u32, now: &mut Micros, ev: &mut VecDeque<Ev>| {
        let mut d = server(
            v4,
            base.wrapping_add(off),
            101,
            flags::ACK,
            &TS,
            seg as usize,
        );
        if pass(tim, Direction::IntoMesh, &mut d, now, ev) == Verdict::Forward {
            if off == drop_at && !dropped {
                dropped = true;
                lost += 1;
            } else if !dropped && off >= held_from && off < drop_at {
                held.borrow_mut().push(d);
            } else {
                ev.push_back(Ev::ToClient(d));
            }
            if off == release_at {
                ev.extend(held.borrow_mut().drain(..).map(Ev::ToClient));
            }
        }
    };
    while snd_nxt + seg <= snd_una + wnd && snd_nxt < total {
        send(tim, snd_nxt, &mut now, &mut ev);
        snd_nxt += seg;
    }
    loop {
        if ev.is_empty() {
            // Nothing else in motion: the overtaken segments arrive.
            ev.extend(held.borrow_mut().drain(..).map(Ev::ToClient));
        }
        let Some(e) = ev.pop_front() else {
            break;
        };
        match e {
            Ev::ToClient(d) => {
                let s = parse(&d).unwrap();
                let off = s.seq.wrapping_sub(base);
                let len = s.payload_len as u32;
                if off == rcv_nxt {
                    rcv_nxt += len;
                    while let Some(l) = ooo.remove(&rcv_nxt) {
                        rcv_nxt += l;
                    }
                } else if off > rcv_nxt {
                    ooo.insert(off, len);
                }
                let mut a = client(v4, 101, base.wrapping_add(rcv_nxt), flags::ACK, offer, &TS);
                if pass(tim, Direction::FromMesh, &mut a, &mut now, &mut ev) == Verdict::Forward {
                    ev.push_back(Ev::ToServer(a));
                }
            }
            Ev::ToServer(a) => {
                let s = parse(&a).unwrap();
                let ack = s.ack.wrapping_sub(base);
                if ack > snd_una {
                    snd_una = ack;
                    dupacks = 0;
                } else if ack == snd_una && s.window == last_window && snd_nxt > snd_una {
                    dupacks += 1;
                    if dupacks == 3 {
                        fast_retransmits += 1;
                        send(tim, snd_una, &mut now, &mut ev);
                    }
                }
                last_window = s.window;
                wnd = u32::from(s.window) << shift;
                while snd_nxt + seg <= snd_una + wnd && snd_nxt < total {
                    send(tim, snd_nxt, &mut now, &mut ev);
                    snd_nxt += seg;
                }
            }
        }
    }
    assert!(identity(&tim.counters()), "{:?}", tim.counters());

    Outcome {
        acked: snd_una,
        fast_retransmits,
        lost,
    }
}

/// The case the netns test caught (docs/gateway.md): window scale 10, the
/// flow's queue above q_max (Algorithm 3 gives q_min = 2 segments), one
/// segment lost mid-transfer. Two segments behind a hole make two
/// duplicate ACKs: neither the gateway (third duplicate) nor the sender
/// (same) repairs it, and the flow waits for the sender's RTO.
#[test]
fn a_sender_without_sack_recovers_a_loss_without_its_timeout() {
    for v4 in [true, false] {
        let mut tim = Tim::new(TimConfig::default());
        let o = transfer(
            &mut tim,
            v4,
            7,
            Some(10),
            false,
            60,
            20 * 1388,
            0,
            2_000_000,
        );
        assert_eq!(o.lost, 1);
        assert_eq!(o.acked, 60 * 1388, "stalled until the RTO: {o:?}");
        assert_eq!(tim.counters().local_retransmissions, 1, "{o:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Any ISN (the wrap), window scale or none, IPv4/IPv6, loss position
    /// and share: a sender without SACK gets its data through after one
    /// loss without waiting for its timeout.
    #[test]
    fn without_sack_one_loss_never_needs_the_timeout(
        v4 in any::<bool>(), isn in any::<u32>(), cws in prop::option::of(0u8..=14),
        lost_seg in 0u32..40, reorder in 0u32..4, share in prop::sample::select(vec![500_000u64, 2_000_000, 20_000_000, 200_000_000]),
    ) {
        let mut tim = Tim::new(TimConfig::default());
        let o = transfer(&mut tim, v4, isn, cws, false, 50, lost_seg * 1388, reorder, share);
        prop_assert_eq!(o.lost, 1);
        prop_assert_eq!(o.acked, 50 * 1388, "{:?}", o);
    }
}

/// Segments before the lost one delayed in the mesh until up to four after
/// it went by (the netns test's veth pairs reorder so): those answer with
/// duplicates of an earlier ACK, not of the hole's. The room for q_max
/// segments still leaves the hole three duplicates of its own.
#[test]
fn a_loss_behind_overtaking_segments_is_recovered_without_sack() {
    for reorder in 1..=4 {
        let mut tim = Tim::new(TimConfig::default());
        let o = transfer(
            &mut tim,
            true,
            7,
            Some(10),
            false,
            60,
            20 * 1388,
            reorder,
            2_000_000,
        );
        assert_eq!(o.lost, 1);
        assert_eq!(o.acked, 60 * 1388, "reorder {reorder}: {o:?}");
        assert_eq!(
            tim.counters().local_retransmissions,
            1,
            "reorder {reorder}: {o:?}"
        );
    }
}
