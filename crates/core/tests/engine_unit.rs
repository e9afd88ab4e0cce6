//! Unit tests of the aggregation engine through its public API: each trigger,
//! each class, link modes, dynamic marking, limits, peer table, service order,
//! round robin, flush, DSCP, non-accepting peers and receive counting.

mod engine_common;

use airpack_core::engine::{
    Classifier, DropReason, Engine, EngineConfig, LinkMode, PeerConfig, Reason, Rule, TrafficClass,
    Transmit, TransmitKind, Verdict,
};
use airpack_core::wire::{DecodeError, Encoding};
use engine_common::*;

const OPP_PORT: u16 = 7000;

fn classifier() -> Classifier {
    Classifier {
        rules: vec![
            Rule {
                class: TrafficClass::Bundle,
                protocol: Some(UDP),
                ports: Some(16384..=32767),
                ..Rule::default()
            },
            Rule {
                class: TrafficClass::Opportunistic,
                dst_ports: Some(OPP_PORT..=OPP_PORT),
                ..Rule::default()
            },
            Rule {
                class: TrafficClass::Bundle,
                protocol: Some(TCP),
                ..Rule::default()
            },
        ],
        default: TrafficClass::Bypass,
    }
}

/// Native encoding, 20 bytes outer overhead; hold 5 ms; min 1400; max 1500.
fn config() -> EngineConfig {
    EngineConfig {
        classifier: classifier(),
        ..EngineConfig::default()
    }
}

fn opp4(total: usize, tag: u32) -> Vec<u8> {
    ipv4(UDP, OPP_PORT, OPP_PORT, 0, total, tag, 0)
}

/// Bundle size on the wire (outer overhead included) of `n` native 60-byte packets.
fn native60(n: usize) -> usize {
    20 + 2 + 61 * n
}

fn drain(e: &mut Engine, now: u64) -> Vec<(Transmit, Vec<u8>)> {
    let mut buf = vec![0u8; 65_535];
    let mut out = Vec::new();
    while let Some(t) = e.poll_transmit(now, &mut buf) {
        out.push((t, buf[..t.len].to_vec()));
        assert!(out.len() < 100_000, "poll_transmit does not terminate");
    }
    check_accounting(e);
    out
}

/// The inner packets of one transmit (a bundle's, or the packet itself).
fn inner(t: &Transmit, bytes: &[u8]) -> Vec<Vec<u8>> {
    match t.kind {
        TransmitKind::Bundle { packets, encoding } => {
            let b = encoding.decode(bytes).expect("engine output decodes");
            assert_eq!(b.len(), packets as usize);
            b.iter().map(<[u8]>::to_vec).collect()
        }
        _ => vec![bytes.to_vec()],
    }
}

#[test]
fn hold_time_trigger_measured_from_oldest_packet() {
    let mut e = Engine::new(config());
    let p = peer(1);
    let pkts: Vec<_> = (0..3).map(|i| udp4(60, 0, i)).collect();
    for (i, pk) in pkts.iter().enumerate() {
        assert_eq!(
            e.handle_packet(1_000 * i as u64, p, pk, 0),
            Verdict::Queued(TrafficClass::Bundle)
        );
    }
    assert_eq!(
        e.poll_timeout(),
        Some(5_000),
        "deadline = oldest arrival + hold time"
    );
    assert!(drain(&mut e, 4_999).is_empty());
    e.handle_timeout(5_000);
    let out = drain(&mut e, 5_000);
    assert_eq!(out.len(), 1);
    let (t, bytes) = &out[0];
    assert_eq!(
        t.kind,
        TransmitKind::Bundle {
            packets: 3,
            encoding: Encoding::Native
        }
    );
    assert_eq!(t.reason, Reason::Timeout);
    assert_eq!(t.peer, p);
    assert_eq!(inner(t, bytes), pkts);
    let s = e.stats();
    assert_eq!(s.counters.sent_on_timeout, 1);
    assert_eq!(s.counters.bundles, 1);
    assert_eq!(s.counters.aggregated_packets, 3);
    assert_eq!(s.counters.aggregated_bytes, 180);
    assert_eq!(s.counters.bundle_wire_bytes, native60(3) as u64);
    assert_eq!(s.hold_time_us.total, 3);
    assert_eq!(s.hold_time_us.sum, 5_000 + 4_000 + 3_000);
    assert_eq!(s.bundle_packets.total, 1);
    assert_eq!(s.bundle_packets.sum, 3);
    assert_eq!(e.poll_timeout(), None);
    assert_eq!(e.queued(), (0, 0));
}

#[test]
fn min_size_trigger_sends_as_soon_as_reached() {
    let mut cfg = config();
    cfg.peer_defaults.min_size = native60(3); // reached by the third packet exactly
    let mut e = Engine::new(cfg);
    let p = peer(1);
    e.handle_packet(0, p, &udp4(60, 0, 0), 0);
    e.handle_packet(10, p, &udp4(60, 0, 1), 0);
    assert!(drain(&mut e, 10).is_empty());
    e.handle_packet(20, p, &udp4(60, 0, 2), 0);
    let out = drain(&mut e, 20);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 3,
            encoding: Encoding::Native
        }
    );
    assert_eq!(out[0].0.reason, Reason::Size);
    assert_eq!(out[0].0.len + 20, native60(3));
    assert_eq!(e.stats().counters.sent_on_size, 1);
    assert_eq!(e.stats().hold_time_us.sum, 20 + 10);
}

#[test]
fn max_size_is_never_exceeded_and_triggers_release() {
    let mut cfg = config();
    cfg.peer_defaults.min_size = 10_000; // never reached
    cfg.peer_defaults.max_size = native60(4); // exactly 4 packets fit
    let mut e = Engine::new(cfg);
    let p = peer(1);
    for i in 0..3 {
        e.handle_packet(0, p, &udp4(60, 0, i), 0);
    }
    assert!(drain(&mut e, 0).is_empty());
    // A queue over the maximum releases a full bundle; the rest waits.
    e.handle_packet(1, p, &udp4(60, 0, 3), 0);
    e.handle_packet(1, p, &udp4(60, 0, 4), 0);
    // (the 4th packet filled the bundle exactly: released by size at once)
    let out = drain(&mut e, 1);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 4,
            encoding: Encoding::Native
        }
    );
    assert_eq!(out[0].0.reason, Reason::Size);
    assert_eq!(out[0].0.len + 20, native60(4));
    // Over the maximum with the queue not yet polled: one full bundle, the rest stays.
    for i in 5..9 {
        e.handle_packet(2, p, &udp4(60, 0, i), 0);
    }
    let out = drain(&mut e, 2);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 4,
            encoding: Encoding::Native
        }
    );
    assert!(out[0].0.len + 20 <= native60(4));
    // The last one waits for its own hold time and leaves alone, unchanged.
    assert_eq!(e.queued(), (1, 60));
    let out = drain(&mut e, 5_002);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.kind, TransmitKind::Single);
    assert_eq!(out[0].1, udp4(60, 0, 8));
}

#[test]
fn max_packets_trigger() {
    let mut cfg = config();
    cfg.peer_defaults.max_packets = 3;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    for i in 0..7 {
        e.handle_packet(0, p, &udp4(60, 0, i), 0);
    }
    let out = drain(&mut e, 0);
    assert_eq!(out.len(), 2, "two full bundles of 3; the 7th waits");
    for (t, _) in &out {
        assert_eq!(
            t.kind,
            TransmitKind::Bundle {
                packets: 3,
                encoding: Encoding::Native
            }
        );
        assert_eq!(t.reason, Reason::Size);
    }
    assert_eq!(e.queued().0, 1);
}

#[test]
fn single_packet_leaves_alone_unchanged() {
    let mut e = Engine::new(config());
    let p = peer(1);
    let pk = udp4(100, 46, 9);
    e.handle_packet(0, p, &pk, 0);
    let out = drain(&mut e, 5_000);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.kind, TransmitKind::Single);
    assert_eq!(out[0].0.reason, Reason::Timeout);
    assert_eq!(out[0].0.dscp, 46);
    assert_eq!(out[0].1, pk, "no outer header, bytes unchanged");
    let c = &e.stats().counters;
    assert_eq!(
        (c.unaggregated_packets, c.unaggregated_bytes, c.bundles),
        (1, 100, 0)
    );
    assert_eq!(c.aggregation_ratio(), 1.0);
}

#[test]
fn opportunistic_leaves_at_once_when_idle_and_joins_when_busy() {
    let mut e = Engine::new(config()); // Fixed mode: link state only matters for opportunistic
    let p = peer(1);
    // idle link: leaves at once, alone
    assert_eq!(
        e.handle_packet(0, p, &opp4(60, 1), 0),
        Verdict::Queued(TrafficClass::Opportunistic)
    );
    let out = drain(&mut e, 0);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].0.kind, out[0].0.reason),
        (TransmitKind::Single, Reason::Idle)
    );
    // bundle class waits in Fixed mode even with an idle link
    e.handle_packet(10, p, &udp4(60, 0, 2), 0);
    assert!(drain(&mut e, 10).is_empty());
    // busy link: the opportunistic packet joins the bundle being filled
    e.set_link_busy(20, true);
    e.handle_packet(20, p, &opp4(60, 3), 0);
    assert!(drain(&mut e, 20).is_empty());
    assert_eq!(e.poll_timeout(), Some(5_010));
    // link idle again: released together, in arrival order
    e.set_link_busy(30, false);
    let out = drain(&mut e, 30);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 2,
            encoding: Encoding::Native
        }
    );
    assert_eq!(out[0].0.reason, Reason::Idle);
    assert_eq!(
        inner(&out[0].0, &out[0].1),
        vec![udp4(60, 0, 2), opp4(60, 3)]
    );
    assert_eq!(e.stats().counters.sent_on_idle, 2);
}

#[test]
fn bypass_class_is_untouched_and_immediate() {
    let mut e = Engine::new(config());
    let p = peer(1);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unmatched", ipv4(UDP, 53, 53, 0, 80, 1, 0)),
        ("tcp syn", ipv4(TCP, 1000, 80, 0, 60, 2, 0x02)),
        ("tcp fin", ipv4(TCP, 1000, 80, 0, 60, 3, 0x11)),
        ("tcp rst", ipv4(TCP, 1000, 80, 0, 60, 4, 0x04)),
        ("fragment", fragment4(60, 5)),
        ("over half max", udp4(751, 0, 6)),
    ];
    for (name, pk) in &cases {
        assert_eq!(
            e.handle_packet(0, p, pk, 0),
            Verdict::Queued(TrafficClass::Bypass),
            "{name}"
        );
        let out = drain(&mut e, 0);
        assert_eq!(out.len(), 1, "{name}");
        assert_eq!(out[0].0.kind, TransmitKind::Bypass, "{name}");
        assert_eq!(&out[0].1, pk, "{name}");
    }
    // a TCP ACK is classified by the rules (bundle here)
    assert_eq!(
        e.handle_packet(0, p, &ipv4(TCP, 1000, 80, 0, 60, 7, 0x10), 0),
        Verdict::Queued(TrafficClass::Bundle)
    );
    // exactly half the maximum may still be bundled
    assert_eq!(
        e.handle_packet(0, p, &udp4(750, 0, 8), 0),
        Verdict::Queued(TrafficClass::Bundle)
    );
    assert_eq!(e.stats().counters.bypass_packets, cases.len() as u64);
}

#[test]
fn packets_the_encoding_cannot_carry_bypass() {
    let mut e = Engine::new(config());
    let p = peer(1);
    e.set_peer(
        p,
        PeerConfig {
            encoding: Encoding::Kau,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    assert_eq!(
        e.handle_packet(0, p, &udp6(80, 0, 1), 0),
        Verdict::Queued(TrafficClass::Bypass)
    );
    assert_eq!(
        e.handle_packet(0, p, &udp4(80, 0, 2), 0),
        Verdict::Queued(TrafficClass::Bundle)
    );
    // a packet carrying a bundle protocol is never nested into a bundle
    assert_eq!(
        e.handle_packet(0, p, &ipv4(253, 0, 0, 0, 80, 3, 0), 0),
        Verdict::Queued(TrafficClass::Bypass)
    );
}

#[test]
fn hold_while_busy_releases_on_idle_max_or_timeout() {
    let mut cfg = config();
    cfg.link_mode = LinkMode::HoldWhileBusy;
    cfg.peer_defaults.max_packets = 4;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    // idle: nothing waits
    e.handle_packet(0, p, &udp4(60, 0, 0), 0);
    let out = drain(&mut e, 0);
    assert_eq!(
        (out.len(), out[0].0.kind, out[0].0.reason),
        (1, TransmitKind::Single, Reason::Idle)
    );
    // busy: packets wait ...
    e.set_link_busy(100, true);
    for i in 1..4 {
        e.handle_packet(100 + i, p, &udp4(60, 0, i as u32), 0);
    }
    assert!(drain(&mut e, 110).is_empty());
    // ... until the link becomes idle
    e.set_link_busy(200, false);
    let out = drain(&mut e, 200);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 3,
            encoding: Encoding::Native
        }
    );
    assert_eq!(out[0].0.reason, Reason::Idle);
    // ... or the maximum is reached
    e.set_link_busy(300, true);
    for i in 0..4 {
        e.handle_packet(300, p, &udp4(60, 0, 10 + i), 0);
    }
    let out = drain(&mut e, 300);
    assert_eq!((out.len(), out[0].0.reason), (1, Reason::Size));
    // ... or the hold time expires while still busy
    e.handle_packet(400, p, &udp4(60, 0, 20), 0);
    e.handle_packet(401, p, &udp4(60, 0, 21), 0);
    assert!(drain(&mut e, 5_399).is_empty());
    assert_eq!(e.poll_timeout(), Some(5_400));
    let out = drain(&mut e, 5_400);
    assert_eq!((out.len(), out[0].0.reason), (1, Reason::Timeout));
    let c = &e.stats().counters;
    assert_eq!(
        (c.sent_on_idle, c.sent_on_size, c.sent_on_timeout),
        (2, 1, 1)
    );
}

#[test]
fn link_busy_again_before_poll_keeps_packets_waiting() {
    let mut cfg = config();
    cfg.link_mode = LinkMode::HoldWhileBusy;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    e.set_link_busy(0, true);
    e.handle_packet(0, p, &udp4(60, 0, 0), 0);
    e.set_link_busy(10, false);
    e.set_link_busy(11, true);
    assert!(
        drain(&mut e, 12).is_empty(),
        "busy again before the driver polled: still held"
    );
    assert_eq!(e.poll_timeout(), Some(5_000));
    e.set_link_busy(20, false);
    assert_eq!(drain(&mut e, 20).len(), 1);
}

#[test]
fn fixed_mode_ignores_link_state_for_bundle_class() {
    let mut e = Engine::new(config());
    let p = peer(1);
    e.set_link_busy(0, true);
    e.handle_packet(0, p, &udp4(60, 0, 0), 0);
    e.set_link_busy(10, false);
    assert!(drain(&mut e, 10).is_empty());
}

#[test]
fn dynamic_marking_sets_peer_max_size() {
    let mut cfg = config();
    cfg.dynamic_marking = true;
    cfg.peer_defaults.min_size = 10_000;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    let mark = (native60(3) as u32) << 2 | 3;
    e.handle_packet(0, p, &udp4(60, 0, 0), mark);
    assert_eq!(e.peer(p).unwrap().max_size, native60(3));
    // Packets over half the new maximum bypass.
    assert_eq!(
        e.handle_packet(0, p, &udp4(200, 0, 1), mark),
        Verdict::Queued(TrafficClass::Bypass)
    );
    for i in 2..5 {
        e.handle_packet(0, p, &udp4(60, 0, i), mark);
    }
    let out = drain(&mut e, 0);
    let bundles: Vec<_> = out
        .iter()
        .filter(|(t, _)| matches!(t.kind, TransmitKind::Bundle { .. }))
        .collect();
    assert_eq!(bundles.len(), 1);
    assert_eq!(
        bundles[0].0.kind,
        TransmitKind::Bundle {
            packets: 3,
            encoding: Encoding::Native
        }
    );
    assert!(bundles[0].0.len + 20 <= native60(3));
    // A mark without the aggregation bits changes nothing.
    e.handle_packet(0, p, &udp4(60, 0, 9), 1500 << 2 | 1);
    assert_eq!(e.peer(p).unwrap().max_size, native60(3));
    // Disabled: marks are ignored.
    let mut e = Engine::new(config());
    e.handle_packet(0, p, &udp4(60, 0, 0), mark);
    assert_eq!(e.peer(p).unwrap().max_size, 1500);
}

#[test]
fn queue_limits_drop_the_oldest() {
    let mut cfg = config();
    cfg.peer_defaults.queue_limit_packets = 3;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    for i in 0..5 {
        assert_eq!(
            e.handle_packet(i, p, &udp4(60, 0, i as u32), 0),
            Verdict::Queued(TrafficClass::Bundle)
        );
    }
    assert_eq!(e.queued(), (3, 180));
    assert_eq!(
        e.stats().counters.dropped[DropReason::QueuePackets.index()],
        2
    );
    assert_eq!(
        e.poll_timeout(),
        Some(5_002),
        "deadline follows the new oldest packet"
    );
    let out = drain(&mut e, 10_000);
    assert_eq!(
        inner(&out[0].0, &out[0].1),
        (2..5).map(|i| udp4(60, 0, i)).collect::<Vec<_>>()
    );

    let mut cfg = config();
    cfg.peer_defaults.queue_limit_bytes = 250;
    let mut e = Engine::new(cfg);
    for i in 0..4 {
        e.handle_packet(0, p, &udp4(100, 0, i), 0);
    }
    assert_eq!(e.queued(), (2, 200));
    assert_eq!(
        e.stats().counters.dropped[DropReason::QueueBytes.index()],
        2
    );
    // a packet larger than the whole limit is dropped itself, keeping the queue
    assert_eq!(
        e.handle_packet(0, p, &udp4(300, 0, 9), 0),
        Verdict::Dropped(DropReason::QueueBytes)
    );
    assert_eq!(e.queued(), (2, 200));
    check_accounting(&e);
    check_peer_accounting(e.peer_stats(p).unwrap(), 2);
}

#[test]
fn peer_table_is_bounded() {
    let mut cfg = config();
    cfg.max_peers = 2;
    let mut e = Engine::new(cfg);
    e.handle_packet(0, peer(1), &udp4(60, 0, 0), 0);
    e.handle_packet(0, peer(2), &udp4(60, 0, 0), 0);
    assert_eq!(
        e.handle_packet(0, peer(3), &udp4(60, 0, 0), 0),
        Verdict::Dropped(DropReason::PeerTableFull)
    );
    assert_eq!(
        e.set_peer(peer(3), PeerConfig::default()),
        Err(DropReason::PeerTableFull)
    );
    assert_eq!(e.peers().count(), 2);
    assert_eq!(
        e.stats().counters.dropped[DropReason::PeerTableFull.index()],
        2 - 1
    );
    // a removed peer's slot is reusable once its queue has drained
    e.remove_peer(peer(1));
    assert!(e.peer(peer(1)).is_none());
    let out = drain(&mut e, 0);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].0.kind, out[0].0.reason, out[0].0.peer),
        (TransmitKind::Single, Reason::Flush, peer(1))
    );
    assert!(e.set_peer(peer(3), PeerConfig::default()).is_ok());
    assert_eq!(e.peers().count(), 2);
    check_accounting(&e);
}

#[test]
fn remove_peer_sends_queued_packets_alone() {
    let mut e = Engine::new(config());
    let p = peer(1);
    for i in 0..3 {
        e.handle_packet(0, p, &udp4(60, 0, i), 0);
    }
    e.remove_peer(p);
    let out = drain(&mut e, 1);
    assert_eq!(out.len(), 3);
    for (i, (t, b)) in out.iter().enumerate() {
        assert_eq!((t.kind, t.reason), (TransmitKind::Single, Reason::Flush));
        assert_eq!(b, &udp4(60, 0, i as u32));
    }
    assert_eq!(e.poll_timeout(), None);
    // the key can come back as a new peer with fresh statistics
    e.handle_packet(2, p, &udp4(60, 0, 0), 0);
    assert_eq!(e.peer_stats(p).unwrap().counters.packets_in, 1);
}

#[test]
fn due_peer_first_then_fullest() {
    let mut cfg = config();
    cfg.peer_defaults.min_size = native60(2);
    let mut e = Engine::new(cfg);
    let (a, b, c) = (peer(1), peer(2), peer(3));
    e.set_peer(
        c,
        PeerConfig {
            min_size: 10_000,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    e.handle_packet(0, c, &udp4(60, 0, 0), 0); // due at 5000
    for i in 0..2 {
        e.handle_packet(4_000, a, &udp4(60, 0, i), 0); // ready by size, 2 packets
    }
    for i in 0..3 {
        e.handle_packet(4_000, b, &udp4(60, 0, i), 0); // ready by size, 3 packets (fuller)
    }
    let mut buf = vec![0u8; 2048];
    let order: Vec<_> = std::iter::from_fn(|| e.poll_transmit(5_000, &mut buf))
        .map(|t| (t.peer, t.reason))
        .collect();
    assert_eq!(
        order,
        vec![(c, Reason::Timeout), (b, Reason::Size), (a, Reason::Size)]
    );
}

#[test]
fn bypass_and_bundles_alternate() {
    let mut cfg = config();
    cfg.peer_defaults.max_packets = 2;
    let mut e = Engine::new(cfg);
    for n in 0..4 {
        for i in 0..2 {
            e.handle_packet(0, peer(n), &udp4(60, 0, i), 0);
        }
    }
    for i in 0..4 {
        e.handle_packet(0, peer(9), &ipv4(UDP, 53, 53, 0, 60, i, 0), 0);
    }
    let kinds: Vec<bool> = drain(&mut e, 0)
        .iter()
        .map(|(t, _)| t.kind == TransmitKind::Bypass)
        .collect();
    assert_eq!(kinds.len(), 8);
    for w in kinds.windows(2) {
        assert_ne!(
            w[0], w[1],
            "neither side gets two turns in a row while both have traffic: {kinds:?}"
        );
    }
    // when one side is empty the other is served back to back
    for i in 0..3 {
        e.handle_packet(0, peer(9), &ipv4(UDP, 53, 53, 0, 60, i, 0), 0);
    }
    assert_eq!(drain(&mut e, 0).len(), 3);
}

#[test]
fn bypass_fifo_is_bounded() {
    let mut cfg = config();
    cfg.bypass_queue_limit = 2;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    let dns = |i| ipv4(UDP, 53, 53, 0, 60, i, 0);
    assert_eq!(
        e.handle_packet(0, p, &dns(0), 0),
        Verdict::Queued(TrafficClass::Bypass)
    );
    assert_eq!(
        e.handle_packet(0, p, &dns(1), 0),
        Verdict::Queued(TrafficClass::Bypass)
    );
    assert_eq!(
        e.handle_packet(0, p, &dns(2), 0),
        Verdict::Dropped(DropReason::BypassQueueFull)
    );
    let out = drain(&mut e, 0);
    assert_eq!(
        out.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
        vec![dns(0), dns(1)]
    );
}

#[test]
fn flush_drains_everything() {
    let mut e = Engine::new(config());
    for n in 0..10 {
        for i in 0..(n + 1) {
            e.handle_packet(0, peer(n), &udp4(60, 0, i), 0);
        }
        e.handle_packet(0, peer(n), &ipv4(UDP, 53, 53, 0, 60, n, 0), 0);
    }
    assert!(
        drain(&mut e, 1).len() == 10,
        "only bypass leaves before flush"
    );
    e.flush();
    let out = drain(&mut e, 2);
    assert_eq!(out.len(), 10);
    assert_eq!(e.queued(), (0, 0));
    assert_eq!(e.poll_timeout(), None);
    let c = &e.stats().counters;
    assert_eq!(c.sent_on_flush, 10);
    assert_eq!(c.aggregated_packets + c.unaggregated_packets, 55);
    assert!(out.iter().all(|(t, _)| t.reason == Reason::Flush));
}

#[test]
fn bundle_dscp_is_the_highest_inside() {
    let mut e = Engine::new(config());
    let p = peer(1);
    e.handle_packet(0, p, &udp4(60, 0, 0), 0);
    e.handle_packet(0, p, &udp4(60, 46, 1), 0);
    e.handle_packet(0, p, &udp4(60, 10, 2), 0);
    let out = drain(&mut e, 5_000);
    assert_eq!(out[0].0.dscp, 46);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 3,
            encoding: Encoding::Native
        }
    );
}

#[test]
fn peer_without_bundle_support_gets_every_packet_unchanged_at_once() {
    let mut e = Engine::new(config());
    let p = peer(1);
    e.set_peer(
        p,
        PeerConfig {
            accepts_bundles: false,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    let pkts: Vec<_> = (0..5).map(|i| udp4(60, 0, i)).collect();
    for pk in &pkts {
        e.handle_packet(0, p, pk, 0);
    }
    let out = drain(&mut e, 0);
    assert_eq!(out.len(), 5);
    for ((t, b), pk) in out.iter().zip(&pkts) {
        assert_eq!(
            (t.kind, t.reason),
            (TransmitKind::Single, Reason::NotAccepted)
        );
        assert_eq!(b, pk);
    }
    // Even packets that kau could not carry are simply sent.
    e.set_peer(
        p,
        PeerConfig {
            accepts_bundles: false,
            encoding: Encoding::Kau,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    assert_eq!(
        e.handle_packet(0, p, &udp6(80, 0, 1), 0),
        Verdict::Queued(TrafficClass::Bundle)
    );
    assert_eq!(drain(&mut e, 0).len(), 1);
}

#[test]
fn becoming_a_bundle_peer_or_not_takes_effect_on_the_queue() {
    let mut e = Engine::new(config());
    let p = peer(1);
    for i in 0..3 {
        e.handle_packet(0, p, &udp4(60, 0, i), 0);
    }
    e.set_peer(
        p,
        PeerConfig {
            accepts_bundles: false,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    assert_eq!(drain(&mut e, 0).len(), 3);
}

#[test]
fn receive_counts_bundles_and_errors() {
    let mut e = Engine::new(config());
    let p = peer(1);
    e.handle_packet(0, p, &udp4(60, 0, 0), 0);
    e.handle_packet(0, p, &udp4(60, 0, 1), 0);
    let out = drain(&mut e, 5_000);
    let bundle = out[0].1.clone();
    let b = e.receive(p, &bundle).unwrap().unwrap();
    assert_eq!(
        b.iter().collect::<Vec<_>>(),
        vec![&udp4(60, 0, 0)[..], &udp4(60, 0, 1)[..]]
    );
    assert_eq!(e.receive(p, &[]).unwrap().unwrap_err(), DecodeError::Empty);
    let unknown = peer(77);
    assert!(
        e.receive(unknown, &bundle).is_none(),
        "unknown: nothing decoded"
    );
    assert!(e
        .receive_with(unknown, Encoding::Native, &bundle[..bundle.len() - 1])
        .is_err());
    assert!(e.peer(unknown).is_none(), "receive does not create peers");
    let t = &e.stats().counters;
    assert_eq!((t.bundles_received, t.packets_received), (1, 2));
    assert_eq!(t.decode_errors.iter().sum::<u64>(), 2);
    assert_eq!(t.decode_errors[DecodeError::Empty.index()], 1);
    let pc = &e.peer_stats(p).unwrap().counters;
    assert_eq!((pc.bundles_received, pc.packets_received), (1, 2));
    assert_eq!(pc.decode_errors.iter().sum::<u64>(), 1);
}

#[test]
fn receive_decodes_with_the_peers_own_encoding() {
    // The engine owns a peer's encoding: `receive(peer, bytes)` decodes with
    // it, and follows `set_peer` when it changes. A kau bundle is not a
    // native one (checked below), so the wrong encoding refuses it.
    let pkts = [udp4(60, 0, 0), udp4(61, 0, 1)];
    let mut kau = vec![0u8; 1500];
    let mut w = airpack_core::BundleWriter::new(Encoding::Kau, &mut kau).unwrap();
    for p in &pkts {
        w.push(p).unwrap();
    }
    let n = w.finish();
    kau.truncate(n);
    let mut e = Engine::new(config());
    let p = peer(1);
    let with = |enc| PeerConfig {
        encoding: enc,
        ..PeerConfig::default()
    };
    e.set_peer(p, with(Encoding::Kau)).unwrap();
    let b = e.receive(p, &kau).unwrap().unwrap();
    assert!(b.iter().eq(pkts.iter().map(|x| &x[..])));
    assert!(Encoding::Native.decode(&kau).is_err(), "the check can fail");
    e.set_peer(p, with(Encoding::Native)).unwrap();
    assert!(e.receive(p, &kau).unwrap().is_err());
    let c = &e.peer_stats(p).unwrap().counters;
    assert_eq!(c.bundles_received, 1);
    assert_eq!(c.decode_errors.iter().sum::<u64>(), 1);
    // An unknown sender: nothing decoded, nothing counted anywhere.
    let before = e.stats().counters;
    assert!(e.receive(peer(9), &kau).is_none());
    assert_eq!(e.stats().counters, before);
}

#[test]
fn malformed_and_oversized_packets_are_dropped_and_counted() {
    let mut e = Engine::new(config());
    let p = peer(1);
    let mut bad = udp4(60, 0, 0);
    bad[10] ^= 0xff; // checksum
    assert_eq!(
        e.handle_packet(0, p, &bad, 0),
        Verdict::Dropped(DropReason::Malformed)
    );
    assert_eq!(
        e.handle_packet(0, p, &[], 0),
        Verdict::Dropped(DropReason::Malformed)
    );
    assert_eq!(
        e.handle_packet(0, p, &vec![0x45; 70_000], 0),
        Verdict::Dropped(DropReason::TooLarge)
    );
    assert!(e.peer(p).is_none(), "rejected packets do not create peers");
    let c = &e.stats().counters;
    assert_eq!(c.dropped[DropReason::Malformed.index()], 2);
    assert_eq!(c.dropped[DropReason::TooLarge.index()], 1);
    check_accounting(&e);
    // a packet that does not fit the caller's buffer is dropped at poll time
    e.handle_packet(0, p, &ipv4(UDP, 53, 53, 0, 600, 1, 0), 0);
    let mut small = [0u8; 100];
    assert!(e.poll_transmit(0, &mut small).is_none());
    assert_eq!(e.stats().counters.dropped[DropReason::TooLarge.index()], 2);
    check_accounting(&e);
}

#[test]
fn max_size_change_applies_to_queued_packets() {
    let mut cfg = config();
    cfg.peer_defaults.min_size = 10_000;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    for i in 0..6 {
        e.handle_packet(0, p, &udp4(60, 0, i), 0);
    }
    assert!(drain(&mut e, 0).is_empty());
    e.set_peer_max_size(p, native60(2));
    let out = drain(&mut e, 0);
    assert_eq!(
        out.len(),
        3,
        "queue now over the maximum: released in full bundles of 2"
    );
    for (t, _) in &out {
        assert!(t.len + 20 <= native60(2));
    }
}

#[test]
fn reconfigure_keeps_queued_packets() {
    let mut e = Engine::new(config());
    let p = peer(1);
    e.handle_packet(0, p, &udp4(60, 0, 0), 0);
    e.handle_packet(0, p, &udp4(60, 0, 1), 0);
    let mut cfg = config();
    cfg.peer_defaults.hold_time = 1_000;
    e.reconfigure(cfg);
    assert_eq!(e.queued(), (2, 120));
    assert_eq!(
        e.poll_timeout(),
        Some(1_000),
        "new hold time applies to queued packets"
    );
    let out = drain(&mut e, 1_000);
    assert_eq!(out.len(), 1);
    // switching to hold-while-busy with an idle link releases at once
    e.handle_packet(2_000, p, &udp4(60, 0, 2), 0);
    let mut cfg = config();
    cfg.link_mode = LinkMode::HoldWhileBusy;
    e.reconfigure(cfg);
    assert_eq!(drain(&mut e, 2_000).len(), 1);
}

#[test]
fn per_peer_statistics_are_separate_and_sum_to_total() {
    let mut cfg = config();
    cfg.peer_defaults.max_packets = 2;
    let mut e = Engine::new(cfg);
    for n in 0..3 {
        for i in 0..(2 * n + 1) {
            e.handle_packet(0, peer(n), &udp4(60, 0, i), 0);
        }
    }
    drain(&mut e, 10_000);
    let mut sum = 0;
    for n in 0..3 {
        let s = e.peer_stats(peer(n)).unwrap();
        check_peer_accounting(s, 0);
        assert_eq!(s.counters.packets_in, 2 * n as u64 + 1);
        assert_eq!(s.counters.bundles, n as u64);
        assert_eq!(s.counters.unaggregated_packets, 1);
        sum += s.counters.aggregated_packets;
    }
    assert_eq!(e.stats().counters.aggregated_packets, sum);
    assert_eq!(e.stats().counters.average_aggregation(), 2.0);
    assert_eq!(e.stats().counters.aggregation_ratio(), 9.0 / 6.0);
}

#[test]
fn ipv6_and_every_encoding_round_trip() {
    for enc in Encoding::ALL {
        let mut e = Engine::new(config());
        let p = peer(1);
        e.set_peer(
            p,
            PeerConfig {
                encoding: enc,
                ..PeerConfig::default()
            },
        )
        .unwrap();
        let mut pkts = vec![udp4(60, 0, 0), udp4(200, 0, 1), udp4(130, 0, 2)];
        if enc != Encoding::Kau {
            pkts.push(udp6(90, 0, 3));
        }
        for pk in &pkts {
            assert_eq!(
                e.handle_packet(0, p, pk, 0),
                Verdict::Queued(TrafficClass::Bundle),
                "{enc}"
            );
        }
        let out = drain(&mut e, 5_000);
        assert_eq!(out.len(), 1, "{enc}");
        assert_eq!(
            out[0].0.kind,
            TransmitKind::Bundle {
                packets: pkts.len() as u16,
                encoding: enc
            }
        );
        assert_eq!(inner(&out[0].0, &out[0].1), pkts, "{enc}");
        assert_eq!(e.receive(p, &out[0].1).unwrap().unwrap().len(), pkts.len());
    }
}

#[test]
fn hold_time_histogram_buckets_each_packet() {
    let mut e = Engine::new(config());
    let p = peer(1);
    for t in [0u64, 4_000, 4_990, 5_000] {
        e.handle_packet(t, p, &udp4(60, 0, t as u32), 0);
    }
    let out = drain(&mut e, 5_000);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 4,
            encoding: Encoding::Native
        }
    );
    // holds 5000, 1000, 10, 0 -> buckets <=5000, <=1000, <=10, <=0
    for h in [
        &e.stats().hold_time_us,
        &e.peer_stats(p).unwrap().hold_time_us,
    ] {
        let nonzero: Vec<(u64, u64)> = h
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (h.bounds[i], c))
            .collect();
        assert_eq!(nonzero, vec![(0, 1), (10, 1), (1_000, 1), (5_000, 1)]);
        assert_eq!((h.total, h.sum), (4, 6_010));
    }
    let b = &e.stats().bundle_packets;
    assert_eq!((b.total, b.sum, b.counts[3]), (1, 4, 1));
}

#[test]
fn reconfigure_updates_on_demand_peers_only() {
    let mut e = Engine::new(config());
    let (auto, manual) = (peer(1), peer(2));
    e.handle_packet(0, auto, &udp4(60, 0, 0), 0);
    e.set_peer(
        manual,
        PeerConfig {
            hold_time: 7_000,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    let mut cfg = config();
    cfg.peer_defaults.hold_time = 2_000;
    cfg.peer_defaults.encoding = Encoding::Simplemux;
    e.reconfigure(cfg);
    assert_eq!(e.peer(auto).unwrap().hold_time, 2_000);
    assert_eq!(e.peer(auto).unwrap().encoding, Encoding::Simplemux);
    assert_eq!(e.peer(manual).unwrap().hold_time, 7_000);
    assert_eq!(e.peer(manual).unwrap().encoding, Encoding::Native);
    // the queued packet survived and now follows the new hold time
    assert_eq!(e.poll_timeout(), Some(2_000));
    assert_eq!(drain(&mut e, 2_000).len(), 1);
}

#[test]
fn encoding_change_keeps_packets_the_new_encoding_cannot_carry() {
    let mut e = Engine::new(config());
    let p = peer(1);
    let pkts = vec![
        udp4(60, 0, 0),
        udp6(80, 0, 1),
        udp4(60, 0, 2),
        udp4(60, 0, 3),
    ];
    for pk in &pkts {
        assert_eq!(
            e.handle_packet(0, p, pk, 0),
            Verdict::Queued(TrafficClass::Bundle)
        );
    }
    // kau cannot carry IPv6: the packets before it and it leave alone, the rest bundled, order kept
    e.set_peer(
        p,
        PeerConfig {
            encoding: Encoding::Kau,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    let out = drain(&mut e, 5_000);
    let kinds: Vec<_> = out.iter().map(|(t, _)| t.kind).collect();
    assert_eq!(
        kinds,
        vec![
            TransmitKind::Single,
            TransmitKind::Single,
            TransmitKind::Bundle {
                packets: 2,
                encoding: Encoding::Kau
            }
        ]
    );
    let all: Vec<Vec<u8>> = out.iter().flat_map(|(t, b)| inner(t, b)).collect();
    assert_eq!(all, pkts);
}

#[test]
fn opportunistic_in_hold_while_busy_mode() {
    let mut cfg = config();
    cfg.link_mode = LinkMode::HoldWhileBusy;
    let mut e = Engine::new(cfg);
    let p = peer(1);
    e.set_link_busy(0, true);
    e.handle_packet(0, p, &opp4(60, 0), 0);
    e.handle_packet(1, p, &udp4(60, 0, 1), 0);
    assert!(
        drain(&mut e, 1).is_empty(),
        "busy: both wait for the bundle"
    );
    e.set_link_busy(2, false);
    let out = drain(&mut e, 2);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].0.kind,
        TransmitKind::Bundle {
            packets: 2,
            encoding: Encoding::Native
        }
    );
    assert_eq!(out[0].0.reason, Reason::Idle);
}
