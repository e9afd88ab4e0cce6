//! Tests of the TCP Improvement Module's per-packet decisions.

use super::*;
use crate::gateway::tcp::{full_checksum, parse, tests::segment};
use proptest::prelude::*;

const MS: Micros = 1000;

/// A server packet (192.0.2.10:443 -> 10.0.0.7:50000 or the IPv6 pair).
pub(super) fn server(
    v4: bool,
    seq: u32,
    ack: u32,
    fl: u16,
    opts: &[u8],
    payload: usize,
) -> Vec<u8> {
    segment(v4, seq, ack, fl, 65_535, opts, &vec![0x5a; payload])
}

/// A client packet: the same with addresses and ports swapped (the
/// checksums stay valid: one's-complement sums do not depend on order).
pub(super) fn client(v4: bool, seq: u32, ack: u32, fl: u16, window: u16, opts: &[u8]) -> Vec<u8> {
    let mut p = segment(v4, seq, ack, fl, window, opts, &[]);
    let (a, b, l) = if v4 { (12, 16, 4) } else { (8, 24, 16) };
    let (x, y) = (p[a..a + l].to_vec(), p[b..b + l].to_vec());
    p[a..a + l].copy_from_slice(&y);
    p[b..b + l].copy_from_slice(&x);
    let t = if v4 { 20 } else { 40 };
    let (sp, dp) = ([p[t], p[t + 1]], [p[t + 2], p[t + 3]]);
    p[t..t + 2].copy_from_slice(&dp);
    p[t + 2..t + 4].copy_from_slice(&sp);
    p
}

/// Linux-like SYN options: MSS, SACK-permitted, timestamps, window scale.
pub(super) fn syn_opts(mss: u16, ws: Option<u8>) -> Vec<u8> {
    let mut o = vec![
        2,
        4,
        (mss >> 8) as u8,
        mss as u8,
        4,
        2,
        8,
        10,
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        0,
    ];
    if let Some(w) = ws {
        o.extend_from_slice(&[1, 3, 3, w]);
    }
    o
}

pub(super) const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8];

struct Run {
    tim: Tim,
    emitted: Vec<(Direction, Vec<u8>)>,
    now: Micros,
}

impl Run {
    fn new(cfg: TimConfig) -> Run {
        Run {
            tim: Tim::new(cfg),
            emitted: Vec::new(),
            now: 0,
        }
    }
    fn go(&mut self, dir: Direction, p: &mut [u8], share: u64) -> Verdict {
        self.now += MS;
        let out = &mut self.emitted;
        self.tim
            .on_packet(dir, p, self.now, share, |d, b| out.push((d, b.to_vec())))
    }
    /// Client SYN, server SYN-ACK, client ACK.
    fn handshake(&mut self, v4: bool, isn: u32, cws: Option<u8>, sws: Option<u8>) {
        let mut syn = client(
            v4,
            100,
            0,
            flags::SYN | flags::ECE | flags::CWR,
            64_240,
            &syn_opts(1400, cws),
        );
        let mut sa = server(
            v4,
            isn,
            101,
            flags::SYN | flags::ACK | flags::ECE,
            &syn_opts(1460, sws),
            0,
        );
        let mut ack = client(v4, 101, isn.wrapping_add(1), flags::ACK, 502, &TS);
        let before = (syn.clone(), sa.clone());
        assert_eq!(
            self.go(Direction::FromMesh, &mut syn, 1_000_000),
            Verdict::Forward
        );
        assert_eq!(
            self.go(Direction::IntoMesh, &mut sa, 1_000_000),
            Verdict::Forward
        );
        assert_eq!((syn, sa), before, "SYNs are never rewritten");
        assert_eq!(
            self.go(Direction::FromMesh, &mut ack, 1_000_000),
            Verdict::Forward
        );
    }
}

pub(super) fn identity(c: &TimCounters) -> bool {
    c.into_mesh + c.from_mesh == c.forwarded + c.dropped_redundant
}

#[test]
fn recovery_redundant_drop_and_replay_on_v4_and_v6() {
    for v4 in [true, false] {
        let mut r = Run::new(TimConfig::default());
        let isn = u32::MAX - 3000; // the data crosses the wrap
        r.handshake(v4, isn, Some(7), Some(7));
        assert_eq!(r.tim.flows(), 1);
        let base = isn.wrapping_add(1);
        let mut sent = Vec::new();
        for k in 0..5u32 {
            let mut d = server(v4, base.wrapping_add(k * 1000), 101, flags::ACK, &TS, 1000);
            assert_eq!(
                r.go(Direction::IntoMesh, &mut d, 1_000_000),
                Verdict::Forward
            );
            sent.push(d);
        }
        assert_eq!(r.tim.buffered_segments(), 5);
        // Segment 1 is lost in the mesh: the client ACKs 1000 four times (SACKing the rest).
        let lost = base.wrapping_add(1000);
        let mut sack = TS.to_vec();
        sack.extend_from_slice(&[1, 1, 5, 10]);
        sack.extend_from_slice(&base.wrapping_add(2000).to_be_bytes());
        sack.extend_from_slice(&base.wrapping_add(5000).to_be_bytes());
        for i in 0..4 {
            let mut a = client(v4, 101, lost, flags::ACK, 4000, &sack);
            let orig = a.clone();
            assert_eq!(
                r.go(Direction::FromMesh, &mut a, 1_000_000),
                Verdict::Forward
            );
            // Only the window and the checksum may change; the SACK blocks stay.
            let t = if v4 { 20 } else { 40 };
            assert_eq!(a[..t + 14], orig[..t + 14]);
            assert_eq!(a[t + 18..], orig[t + 18..]);
            assert_eq!(full_checksum(&a), Some(parse(&a).unwrap().checksum));
            let local = r
                .emitted
                .iter()
                .filter(|(d, _)| *d == Direction::IntoMesh)
                .count();
            assert_eq!(
                local,
                usize::from(i >= 3),
                "the third duplicate retransmits, once"
            );
        }
        let (d, p) = &r.emitted[0];
        assert_eq!(
            (*d, p),
            (Direction::IntoMesh, &sent[1]),
            "the buffered copy, as sent"
        );
        // The hole is filled; the server's own retransmission of it is redundant.
        let mut a = client(v4, 101, base.wrapping_add(5000), flags::ACK, 4000, &TS);
        r.go(Direction::FromMesh, &mut a, 1_000_000);
        let mut rtx = sent[1].clone();
        assert_eq!(
            r.go(Direction::IntoMesh, &mut rtx, 1_000_000),
            Verdict::DropRedundant
        );
        let (d, p) = r.emitted.last().unwrap();
        assert_eq!(
            (*d, p),
            (Direction::FromMesh, &a),
            "the latest ACK is replayed"
        );
        // A keep-alive (one byte below the ACK) is never dropped.
        let mut ka = server(v4, base.wrapping_add(4999), 101, flags::ACK, &TS, 1);
        assert_eq!(
            r.go(Direction::IntoMesh, &mut ka, 1_000_000),
            Verdict::Forward
        );
        let c = r.tim.counters();
        assert_eq!(
            (c.local_retransmissions, c.dropped_redundant, c.ack_replays),
            (1, 1, 1)
        );
        assert!(identity(&c));
        // FINs both ways end the flow and free its buffer.
        let mut f1 = server(
            v4,
            base.wrapping_add(5000),
            101,
            flags::FIN | flags::ACK,
            &[],
            0,
        );
        let mut f2 = client(
            v4,
            101,
            base.wrapping_add(5001),
            flags::FIN | flags::ACK,
            4000,
            &[],
        );
        r.go(Direction::IntoMesh, &mut f1, 1_000_000);
        r.go(Direction::FromMesh, &mut f2, 1_000_000);
        assert_eq!((r.tim.flows(), r.tim.buffered_segments()), (0, 0));
    }
}

#[test]
fn window_follows_the_virtual_queue_and_is_zero_only_without_share() {
    let mut r = Run::new(TimConfig::default());
    r.handshake(true, 1, Some(2), Some(2));
    let ack_window = |r: &mut Run, ack: u32, share: u64| {
        let mut a = client(true, 101, ack, flags::ACK, 60_000, &[]);
        r.go(Direction::FromMesh, &mut a, share);
        u32::from(parse(&a).unwrap().window) << 2
    };
    // Nothing queued, nothing in flight: q < q_min -> q_max packets.
    assert_eq!(ack_window(&mut r, 2, 1_000_000), 6 * 1400);
    // Ten 1040-byte packets at once with a 1 Mbit/s share: the queue is
    // ~10 packets > q_max -> q_min + packets in the mesh (0 yet).
    let mut seq = 2u32;
    for _ in 0..10 {
        let mut d = server(true, seq, 101, flags::ACK, &[], 1000);
        r.tim
            .on_packet(Direction::IntoMesh, &mut d, r.now, 1_000_000, |_, _| {});
        seq += 1000;
    }
    // 1 ms after them at 1 Mbit/s: 125 bytes drained, 10 packets queued.
    assert_eq!(ack_window(&mut r, 2, 1_000_000), 2 * 1400);
    // Share 0: the window closes, and only then.
    assert_eq!(ack_window(&mut r, 2, 0), 0);
    assert_eq!(r.tim.counters().windows_zero, 1);
    // Much later the queue has drained: the 10 000 bytes are in the mesh
    // (8 segments of the client's MSS): q < q_min -> q_max + 8.
    r.now += 10_000 * MS;
    assert_eq!(ack_window(&mut r, 2, 1_000_000), (6 + 8) * 1400);
    // A loss at 2: the client SACKs the other 9000 bytes. They are
    // delivered, not in the mesh (1 packet is), and the window counts from
    // the ACK: it covers them on top of q_max + 1, so the sender may go on.
    let mut opts = vec![1, 1, 5, 10];
    opts.extend_from_slice(&1002u32.to_be_bytes());
    opts.extend_from_slice(&10_002u32.to_be_bytes());
    let mut a = client(true, 101, 2, flags::ACK, 60_000, &opts);
    r.go(Direction::FromMesh, &mut a, 1_000_000);
    assert_eq!(
        u32::from(parse(&a).unwrap().window) << 2,
        (6 + 1) * 1400 + 9000
    );
}

#[test]
fn unknown_options_and_unparsable_packets_pass() {
    let mut r = Run::new(TimConfig {
        compensate_hop: true,
        ..TimConfig::default()
    });
    // MPTCP (30), TCP-AO (29) and an experimental option (254) on every packet.
    let odd = [30, 4, 0, 1, 29, 6, 1, 2, 3, 4, 254, 4, 0xf9, 0x89];
    let mut syn_o = syn_opts(1400, Some(7));
    syn_o.extend_from_slice(&odd);
    let mut syn = client(true, 100, 0, flags::SYN, 64_240, &syn_o);
    r.go(Direction::FromMesh, &mut syn, 1);
    let mut sa = server(true, 7, 101, flags::SYN | flags::ACK, &syn_o, 0);
    r.go(Direction::IntoMesh, &mut sa, 1);
    assert_eq!(sa[8], 65, "hop limit raised by one");
    assert_eq!(
        crate::wire::ip::checksum(&sa[..20]),
        0,
        "IPv4 header checksum still right"
    );
    let mut d = server(true, 8, 101, flags::ACK, &odd, 100);
    let orig = d.clone();
    assert_eq!(r.go(Direction::IntoMesh, &mut d, 1), Verdict::Forward);
    assert_eq!(d[20..], orig[20..], "TCP bytes untouched");
    assert_eq!(r.tim.flows(), 1);
    assert_eq!(
        r.tim.flow_counters().unknown,
        0,
        "tracked despite the options"
    );
    // A TCP-MD5 signed ACK (kind 19, 18 bytes): the signature covers the
    // window, so it is never rewritten, even far above the target.
    let mut md5 = vec![19, 18];
    md5.extend_from_slice(&[0xab; 16]);
    let mut signed = client(true, 101, 108, flags::ACK, 60_000, &md5);
    let orig = signed.clone();
    assert_eq!(
        r.go(Direction::FromMesh, &mut signed, 1_000_000),
        Verdict::Forward
    );
    assert_eq!(signed, orig);
    assert_eq!(r.tim.counters().signed_untouched, 1);
    let mut plain = client(true, 101, 108, flags::ACK, 60_000, &[]);
    r.go(Direction::FromMesh, &mut plain, 1_000_000);
    assert!(
        parse(&plain).unwrap().window < 60_000,
        "the unsigned one is"
    );
    // A malformed option (window scale of length 4): untouched, counted.
    let mut bad = client(true, 101, 108, flags::ACK, 1000, &[3, 4, 7, 0]);
    let orig = bad.clone();
    assert_eq!(r.go(Direction::FromMesh, &mut bad, 1), Verdict::Forward);
    assert_eq!(bad, orig);
    // Not TCP (UDP), and a truncated packet.
    let mut udp = orig.clone();
    udp[9] = 17;
    udp[10] = 0;
    udp[11] = 0;
    let c = crate::wire::ip::checksum(&udp[..20]);
    udp[10..12].copy_from_slice(&c.to_be_bytes());
    r.go(Direction::FromMesh, &mut udp, 1);
    r.go(Direction::FromMesh, &mut [0x45, 0, 0], 1);
    let c = r.tim.counters();
    assert_eq!(
        (
            c.not_understood.bad_option,
            c.not_understood.not_tcp,
            c.not_understood.bad_ip
        ),
        (1, 1, 1)
    );
    assert!(identity(&c));
}

#[test]
fn a_syn_flood_stays_within_the_table_and_the_live_flow_keeps_its_state() {
    let cfg = TimConfig {
        flows: FlowConfig {
            max_flows: 16,
            ..FlowConfig::default()
        },
        ..TimConfig::default()
    };
    let mut r = Run::new(cfg);
    r.handshake(true, 1, Some(7), Some(7));
    for port in 0..5000u16 {
        let mut syn = client(true, u32::from(port), 0, flags::SYN, 1000, &[]);
        let t = 20;
        syn[t..t + 2].copy_from_slice(&port.to_be_bytes());
        // The source port changed: fix the checksum by recomputing it.
        syn[t + 16] = 0;
        syn[t + 17] = 0;
        let c = full_checksum(&syn).unwrap();
        syn[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
        assert_eq!(r.go(Direction::FromMesh, &mut syn, 1), Verdict::Forward);
        assert!(r.tim.flows() <= 16);
    }
    assert!(r.tim.flow_counters().table_full > 4900);
    // The established flow is still improved.
    let mut d = server(true, 2, 101, flags::ACK, &[], 1000);
    r.go(Direction::IntoMesh, &mut d, 1);
    assert_eq!(r.tim.buffered_segments(), 1);
    // After the SYN timeout the half-open flows go; the live one stays.
    r.tim.expire(r.now + cfg.flows.syn_timeout_us + 1);
    assert_eq!(r.tim.flows(), 1);
    assert!(r.tim.memory_bound() < 16 * 8 * 1600 + 16 * 1024);
}

proptest! {
    /// Through a whole exchange (random ISNs near the wrap, window scales,
    /// MSS, SACK blocks, timestamps, IPv4/IPv6, shares): every packet's
    /// TCP checksum verifies, a client ACK changes in its window and
    /// checksum only, the window only shrinks and stays open (at least
    /// q_min segments, or the client's offer) while the share is not zero,
    /// data goes through untouched, and the accounting holds.
    #[test]
    fn rewriting_is_checksum_exact_and_only_lowers(
        v4 in any::<bool>(), isn in any::<u32>(), cws in proptest::option::of(0u8..=14),
        sws in proptest::option::of(0u8..=14), segs in 1usize..40, mss in 536u16..1460,
        offered in any::<u16>(), share in prop_oneof![Just(0u64), 1u64..100_000_000],
        sack in any::<bool>(), loss_at in 0usize..40,
    ) {
        let mut r = Run::new(TimConfig::default());
        let _ = mss;
        r.handshake(v4, isn, cws, sws);
        let shift = match (cws, sws) { (Some(c), Some(_)) => c, _ => 0 };
        let base = isn.wrapping_add(1);
        let mut acked = base;
        for k in 0..segs as u32 {
            let mut d = server(v4, base.wrapping_add(k * 1000), 101, flags::ACK, &TS, 1000);
            let orig = d.clone();
            prop_assert_eq!(r.go(Direction::IntoMesh, &mut d, share), Verdict::Forward);
            prop_assert_eq!(&d, &orig);
            if k as usize != loss_at {
                acked = base.wrapping_add((k + 1) * 1000);
            }
            let mut opts = TS.to_vec();
            if sack && k as usize > loss_at {
                opts.extend_from_slice(&[1, 1, 5, 10]);
                opts.extend_from_slice(&base.wrapping_add((loss_at as u32 + 1) * 1000).to_be_bytes());
                opts.extend_from_slice(&base.wrapping_add((k + 1) * 1000).to_be_bytes());
            }
            let mut a = client(v4, 101, acked, flags::ACK, offered, &opts);
            let orig = a.clone();
            prop_assert_eq!(r.go(Direction::FromMesh, &mut a, share), Verdict::Forward);
            let s = parse(&a).unwrap();
            prop_assert_eq!(full_checksum(&a), Some(s.checksum));
            let t = s.tcp_offset;
            prop_assert_eq!(&a[..t + 14], &orig[..t + 14]);
            prop_assert_eq!(&a[t + 18..], &orig[t + 18..]);
            prop_assert!(s.window <= offered);
            if share > 0 {
                // At least q_min (2) segments of the client's MSS (1400).
                let floor = (2u32 * 1400).div_ceil(1 << shift).min(u32::from(u16::MAX)) as u16;
                prop_assert!(s.window >= floor.min(offered), "{} < {}", s.window, floor);
            }
        }
        for (d, p) in &r.emitted {
            let s = parse(p).unwrap();
            prop_assert_eq!(full_checksum(p), Some(s.checksum));
            prop_assert_eq!(*d, Direction::IntoMesh);
        }
        prop_assert!(r.emitted.len() <= 1);
        prop_assert!(identity(&r.tim.counters()));
    }

    #[test]
    fn any_bytes_in_either_direction_never_panic(
        bufs in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..100)), 0..50),
    ) {
        let mut r = Run::new(TimConfig { compensate_hop: true, ..TimConfig::default() });
        for (into, mut b) in bufs {
            let dir = if into { Direction::IntoMesh } else { Direction::FromMesh };
            r.go(dir, &mut b, 1000);
        }
        prop_assert!(identity(&r.tim.counters()));
    }
}
