//! Tests of the flow table, sequence arithmetic and the window rule.

use super::*;
use crate::gateway::tcp::{self, tests::segment};
use proptest::prelude::*;

fn key(port: u16) -> FlowKey {
    FlowKey {
        client: ("10.0.0.7".parse().unwrap(), port),
        server: ("192.0.2.10".parse().unwrap(), 443),
    }
}

fn seg(fl: u16, seq: u32, ack: u32, opts: &[u8], payload: usize) -> TcpSegment {
    tcp::parse(&segment(
        true,
        seq,
        ack,
        fl,
        1000,
        opts,
        &vec![0u8; payload],
    ))
    .unwrap()
}

const WS7_MSS1400: [u8; 8] = [2, 4, 0x05, 0x78, 1, 3, 3, 7];
const WS2: [u8; 4] = [1, 3, 3, 2];

/// Client SYN, server SYN-ACK (ISN `isn`), client ACK.
fn handshake(t: &mut FlowTable, k: FlowKey, isn: u32, server_opts: &[u8]) -> FlowState {
    assert!(t
        .on_segment(
            k,
            Side::Client,
            &seg(flags::SYN, 100, 0, &WS7_MSS1400, 0),
            0
        )
        .0
        .is_some());
    t.on_segment(
        k,
        Side::Server,
        &seg(flags::SYN | flags::ACK, isn, 101, server_opts, 0),
        10,
    );
    t.on_segment(
        k,
        Side::Client,
        &seg(flags::ACK, 101, isn.wrapping_add(1), &[], 0),
        20,
    )
    .0
    .unwrap()
}

#[test]
fn window_scale_needs_both_syns() {
    let mut t = FlowTable::new(FlowConfig::default());
    let f = handshake(&mut t, key(1), 5000, &WS2);
    assert!(f.established);
    assert_eq!(
        (f.client_wscale, f.server_wscale, f.client_shift(), f.mss),
        (Some(7), Some(2), 7, 1400)
    );
    let g = handshake(&mut t, key(2), 5000, &[]);
    assert_eq!(
        (g.client_wscale, g.client_shift(), g.mss),
        (Some(7), 0, 1400),
        "no scaling; the client's MSS"
    );
    assert_eq!(t.len(), 2);
}

#[test]
fn in_flight_follows_data_and_acks_across_the_wrap() {
    let mut t = FlowTable::new(FlowConfig::default());
    let isn = u32::MAX - 2000;
    let k = key(1);
    handshake(&mut t, k, isn, &WS2);
    let mut seq = isn.wrapping_add(1);
    for _ in 0..5 {
        t.on_segment(k, Side::Server, &seg(flags::ACK, seq, 101, &[], 1400), 30);
        seq = seq.wrapping_add(1400);
    }
    let f = *t.get(&k).unwrap();
    assert_eq!(
        (f.snd_max, f.in_flight_packets()),
        (seq, 5),
        "snd_max wrapped past 0"
    );
    assert!(seq_lt(isn, f.snd_max));
    // A retransmission of old data does not move snd_max back.
    t.on_segment(
        k,
        Side::Server,
        &seg(flags::ACK, isn.wrapping_add(1), 101, &[], 1400),
        31,
    );
    assert_eq!(t.get(&k).unwrap().snd_max, seq);
    // ACK of 3 packets; an old (reordered) ACK does not move ack_max back.
    let ack3 = isn.wrapping_add(1 + 3 * 1400);
    t.on_segment(k, Side::Client, &seg(flags::ACK, 101, ack3, &[], 0), 40);
    t.on_segment(
        k,
        Side::Client,
        &seg(flags::ACK, 101, isn.wrapping_add(1), &[], 0),
        41,
    );
    let f = *t.get(&k).unwrap();
    assert_eq!((f.ack_max, f.in_flight_packets()), (ack3, 2));
}

#[test]
fn flows_end_on_rst_or_both_fins_and_slots_are_reused() {
    let mut t = FlowTable::new(FlowConfig {
        max_flows: 2,
        ..FlowConfig::default()
    });
    let a = handshake(&mut t, key(1), 1, &[]);
    handshake(&mut t, key(2), 1, &[]);
    assert!(
        t.on_segment(key(1), Side::Server, &seg(flags::RST, 2, 0, &[], 0), 50)
            .1
    );
    let c = handshake(&mut t, key(3), 1, &[]);
    assert_eq!(c.slot, a.slot, "the freed slot");
    t.on_segment(
        key(3),
        Side::Server,
        &seg(flags::FIN | flags::ACK, 2, 101, &[], 0),
        60,
    );
    assert_eq!(t.len(), 2);
    let (st, ended) = t.on_segment(
        key(3),
        Side::Client,
        &seg(flags::FIN | flags::ACK, 101, 3, &[], 0),
        61,
    );
    assert!(ended && st.unwrap().fin_server);
    assert_eq!((t.len(), t.counters().ended), (1, 2));
    // Mid-stream segments of unknown flows pass untouched.
    assert_eq!(
        t.on_segment(key(9), Side::Server, &seg(flags::ACK, 5, 5, &[], 100), 70),
        (None, false)
    );
    assert_eq!(t.counters().unknown, 1);
}

#[test]
fn a_syn_flood_cannot_hold_the_table() {
    let cfg = FlowConfig {
        max_flows: 8,
        ..FlowConfig::default()
    };
    let mut t = FlowTable::new(cfg);
    let live = handshake(&mut t, key(0), 1, &[]);
    for p in 1..200 {
        t.on_segment(key(p), Side::Client, &seg(flags::SYN, 1, 0, &[], 0), 100);
    }
    assert_eq!((t.len(), t.counters().table_full), (8, 192));
    // Keep the real flow alive; after the SYN timeout the half-open ones go.
    let later = 100 + cfg.syn_timeout_us + 1;
    t.on_segment(
        key(0),
        Side::Client,
        &seg(flags::ACK, 101, 2, &[], 0),
        later - 1,
    );
    let (st, _) = t.on_segment(
        key(500),
        Side::Client,
        &seg(flags::SYN, 1, 0, &[], 0),
        later,
    );
    assert!(st.is_some());
    assert_eq!(t.len(), 2);
    assert_eq!(t.get(&key(0)).unwrap().slot, live.slot);
    // Established flows expire after the idle timeout only.
    let mut freed = Vec::new();
    t.expire(later + cfg.idle_timeout_us + 1, |s| freed.push(s));
    assert_eq!((t.len(), freed.len()), (0, 2));
}

#[test]
fn algorithm_3_window() {
    let t = FlowTable::new(FlowConfig::default());
    assert_eq!(t.window_packets(1, 3, 1000), 6 + 3, "q < q_min: q_max + M");
    assert_eq!(t.window_packets(7, 3, 1000), 2 + 3, "q > q_max: q_min + M");
    assert_eq!(
        t.window_packets(7, 3, 0),
        0,
        "q > q_max and share 0: freeze"
    );
    assert_eq!(t.window_packets(4, 3, 0), 4 + 3, "in between: the middle");
    assert_eq!(t.window_packets(2, 0, 5), 4);
    assert_eq!(t.window_packets(6, 0, 5), 4);
}

#[test]
fn rewritten_windows_scale_and_only_shrink() {
    let mut t = FlowTable::new(FlowConfig::default());
    let f = handshake(&mut t, key(1), 1, &WS2);
    let ack = |w: u16| tcp::parse(&segment(true, 101, 2, flags::ACK, w, &[], &[])).unwrap();
    let s = ack(1000);
    // 4 packets * 1400 = 5600 bytes >> 7 = 43.75 -> 44.
    assert_eq!(rewritten_window(&f, &s, 4), Some(44));
    assert_eq!(rewritten_window(&f, &s, 0), Some(0));
    let small = ack(10);
    assert_eq!(
        rewritten_window(&f, &small, 4),
        Some(10),
        "never above the client's offer"
    );
    let syn = seg(flags::SYN | flags::ACK, 1, 1, &[], 0);
    assert_eq!(rewritten_window(&f, &syn, 4), None);
}

proptest! {
    #[test]
    fn sequence_arithmetic_wraps(a in any::<u32>(), k in 1u32..(1 << 31)) {
        let b = a.wrapping_add(k);
        prop_assert!(seq_lt(a, b) && !seq_lt(b, a) && seq_le(a, b) && seq_le(a, a));
        prop_assert_eq!(seq_max(a, b), b);
        prop_assert_eq!(seq_max(b, a), b);
    }

    #[test]
    fn window_scaling_covers_the_target_without_exceeding_the_offer(
        ws in 0u8..=14, mss in 1u16..9000, packets in 0u32..64, offered in any::<u16>(),
    ) {
        let st = FlowState { slot: 0, client_wscale: Some(ws), server_wscale: Some(0), client_sack: true, server_sack: true, established: true, mss,
            snd_max: 0, ack_max: 0, fin_client: false, fin_server: false, last_seen: 0 };
        let s = tcp::parse(&segment(true, 1, 1, flags::ACK, offered, &[], &[])).unwrap();
        let w = rewritten_window(&st, &s, packets).unwrap();
        prop_assert!(w <= offered);
        let target = u64::from(packets) * u64::from(mss);
        let covered = u64::from(w) << ws;
        // The written window covers the target unless the offer is smaller.
        prop_assert!(covered >= target.min(u64::from(offered) << ws) || w == u16::MAX);
        prop_assert!(packets == 0 || w > 0 || offered == 0);
    }

    #[test]
    fn awnd_is_zero_only_when_the_share_is_zero(q in 0u32..100, m in 0u32..1000, share in 0u64..10_000_000) {
        let t = FlowTable::new(FlowConfig { max_flows: 1, ..FlowConfig::default() });
        let w = t.window_packets(q, m, share);
        if share > 0 {
            prop_assert!(w >= 2);
        }
        if w == 0 {
            prop_assert!(share == 0 && q > 6);
        }
    }
}
