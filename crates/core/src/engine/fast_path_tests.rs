//! The fast path of `Engine::handle_packet` (known peer, unfragmented
//! UDP/IPv4 with a 20-byte header) against the general path: two engines with
//! the same configuration get the same random sequence of packets (voice and
//! every kind the fast path must refuse or classify differently: fragments,
//! options, bad checksums, TCP, IPv6, bundle protocols, oversized and garbage),
//! marks, time, link changes, peer changes and flushes; one of them takes the
//! general path for every packet. Verdicts, every transmitted datagram (bytes
//! and metadata), statistics, queue state and deadlines must be identical.

use super::*;
use crate::wire::ip::checksum;
use core::net::{Ipv4Addr, Ipv6Addr};
use proptest::prelude::*;

const PEERS: u32 = 6;

#[derive(Clone, Debug)]
enum Pkt {
    /// UDP/IPv4: ports, DSCP, total length, flags/offset field, IHL, checksum broken.
    Udp4 {
        sport: u16,
        dport: u16,
        dscp: u8,
        len: usize,
        frag: u16,
        ihl: u8,
        bad_sum: bool,
    },
    /// TCP/IPv4 with flags.
    Tcp4(u8, usize),
    /// IPv4 carrying a bundle protocol.
    Nested(usize),
    /// UDP/IPv6.
    Udp6(u16, usize),
    /// Arbitrary bytes.
    Raw(Vec<u8>),
}

fn v4(protocol: u8, ihl: u8, dscp: u8, len: usize, frag: u16, l4: &[u8]) -> Vec<u8> {
    let hl = usize::from(ihl) * 4;
    let len = len.max(hl + l4.len());
    let mut p = vec![0u8; len];
    p[0] = 0x40 | ihl;
    p[1] = dscp << 2;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[4..6].copy_from_slice(&(len as u16 ^ 0x5555).to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = 64;
    p[9] = protocol;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    for (i, b) in p[20..hl].iter_mut().enumerate() {
        *b = if i == 0 { 1 } else { 0 }; // NOP options
    }
    p[hl..hl + l4.len()].copy_from_slice(l4);
    let c = checksum(&p[..hl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

fn bytes(p: &Pkt) -> Vec<u8> {
    match p {
        Pkt::Udp4 {
            sport,
            dport,
            dscp,
            len,
            frag,
            ihl,
            bad_sum,
        } => {
            let mut l4 = [0u8; 8];
            l4[..2].copy_from_slice(&sport.to_be_bytes());
            l4[2..4].copy_from_slice(&dport.to_be_bytes());
            let mut p = v4(17, *ihl, *dscp, *len, *frag, &l4);
            if *bad_sum {
                p[8] ^= 1;
            }
            p
        }
        Pkt::Tcp4(flags, len) => {
            let mut l4 = [0u8; 20];
            l4[..2].copy_from_slice(&16384u16.to_be_bytes());
            l4[2..4].copy_from_slice(&80u16.to_be_bytes());
            l4[12] = 0x50;
            l4[13] = *flags;
            v4(6, 5, 0, *len, 0, &l4)
        }
        Pkt::Nested(len) => v4(253, 5, 0, *len, 0, &[0x40, 0, 0x40, 0]),
        Pkt::Udp6(port, len) => {
            let len = (*len).max(48);
            let mut p = vec![0u8; len];
            p[0] = 0x6b;
            p[1] = 0x80;
            p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            p[6] = 17;
            p[7] = 64;
            p[8..24].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
            p[24..40].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
            p[40..42].copy_from_slice(&port.to_be_bytes());
            p[42..44].copy_from_slice(&port.to_be_bytes());
            p
        }
        Pkt::Raw(b) => b.clone(),
    }
}

fn pkt() -> impl Strategy<Value = Pkt> {
    let port = prop_oneof![16380u16..16390, 32760u16..32770, Just(7000u16), Just(53u16)];
    let udp4 = (
        port.clone(),
        port,
        prop_oneof![Just(0u8), Just(46), 0u8..64],
        prop_oneof![6 => 24usize..200, 1 => 600usize..1600],
        prop_oneof![8 => Just(0u16), 1 => Just(0x4000u16), 1 => Just(0x2000u16), 1 => 1u16..0x2000],
        prop_oneof![8 => Just(5u8), 1 => Just(6u8)],
        prop::bool::weighted(0.05),
    )
        .prop_map(|(sport, dport, dscp, len, frag, ihl, bad_sum)| Pkt::Udp4 {
            sport,
            dport,
            dscp,
            len,
            frag,
            ihl,
            bad_sum,
        });
    prop_oneof![
        20 => udp4,
        2 => (prop_oneof![Just(0x10u8), Just(0x02), Just(0x11)], 40usize..200).prop_map(|(f, l)| Pkt::Tcp4(f, l)),
        1 => (24usize..100).prop_map(Pkt::Nested),
        2 => (prop_oneof![Just(16384u16), Just(53u16)], 48usize..200).prop_map(|(p, l)| Pkt::Udp6(p, l)),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Pkt::Raw),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Packet(u32, Pkt, u32),
    Advance(u64),
    Link(bool),
    MaxSize(u32, usize),
    SetPeer(u32, PeerConfig),
    Remove(u32),
    Flush,
}

fn peer_config() -> impl Strategy<Value = PeerConfig> {
    (
        prop_oneof![
            Just(Encoding::Native),
            Just(Encoding::Kau),
            Just(Encoding::Simplemux)
        ],
        prop::bool::weighted(0.9),
        0u64..10_000,
        0usize..2_000,
        100usize..2_000,
        1usize..40,
        prop_oneof![Just(0usize), Just(20), Just(28)],
        0usize..3_000,
        0usize..30,
    )
        .prop_map(
            |(
                encoding,
                accepts_bundles,
                hold_time,
                min_size,
                max_size,
                max_packets,
                outer_overhead,
                qb,
                qp,
            )| {
                PeerConfig {
                    encoding,
                    accepts_bundles,
                    hold_time,
                    min_size,
                    max_size,
                    max_packets,
                    outer_overhead,
                    queue_limit_bytes: qb,
                    queue_limit_packets: qp,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let mark = prop_oneof![
        4 => Just(0u32),
        1 => any::<u32>(),
        1 => (0u32..3000).prop_map(|m| m << 2 | 3),
        1 => 0u32..8,
    ];
    prop_oneof![
        30 => (0..PEERS, pkt(), mark).prop_map(|(p, k, m)| Op::Packet(p, k, m)),
        3 => prop_oneof![0u64..100, 0u64..20_000].prop_map(Op::Advance),
        2 => any::<bool>().prop_map(Op::Link),
        1 => (0..PEERS, 60usize..2_000).prop_map(|(p, m)| Op::MaxSize(p, m)),
        1 => (0..PEERS, peer_config()).prop_map(|(p, c)| Op::SetPeer(p, c)),
        1 => (0..PEERS).prop_map(Op::Remove),
        1 => Just(Op::Flush),
    ]
}

fn classifier(which: u8) -> Classifier {
    let voice = Rule {
        class: TrafficClass::Bundle,
        protocol: Some(17),
        ports: Some(16384..=32767),
        ..Rule::default()
    };
    let rules = match which {
        0 => vec![voice],
        1 => vec![
            voice,
            Rule {
                class: TrafficClass::Opportunistic,
                dscp: Some(46..=46),
                ..Rule::default()
            },
            Rule {
                class: TrafficClass::Bundle,
                mark: Some((3, 3)),
                ..Rule::default()
            },
        ],
        2 => vec![
            Rule {
                class: TrafficClass::Bypass,
                version: Some(6),
                ..Rule::default()
            },
            Rule {
                class: TrafficClass::Opportunistic,
                src_ports: Some(7000..=7000),
                len: Some(0..=100),
                ..Rule::default()
            },
            Rule {
                class: TrafficClass::Bundle,
                protocol: Some(6),
                ..Rule::default()
            },
            Rule {
                class: TrafficClass::Bundle,
                dst_ports: Some(16384..=16386),
                dscp: Some(0..=10),
                ..Rule::default()
            },
        ],
        _ => vec![],
    };
    Classifier {
        rules,
        default: [
            TrafficClass::Bypass,
            TrafficClass::Bundle,
            TrafficClass::Opportunistic,
        ][usize::from(which) % 3],
    }
}

fn key(p: u32) -> PeerKey {
    if p == PEERS - 1 {
        PeerKey::V6(Ipv6Addr::from(0xfd00u128 << 112 | 7))
    } else {
        PeerKey::V4(Ipv4Addr::from(0x0a01_0000 + p))
    }
}

fn same_state(a: &mut Engine, b: &mut Engine) {
    assert_eq!(a.stats(), b.stats());
    assert_eq!(a.queued(), b.queued());
    assert_eq!(a.poll_timeout(), b.poll_timeout());
    for p in 0..PEERS {
        let k = key(p);
        assert_eq!(a.peer_stats(k), b.peer_stats(k), "peer {p}");
        assert_eq!(a.peer_queued(k), b.peer_queued(k), "peer {p}");
        assert_eq!(a.peer(k), b.peer(k), "peer {p}");
    }
}

fn drain(a: &mut Engine, b: &mut Engine, now: u64, buf_a: &mut [u8], buf_b: &mut [u8]) {
    loop {
        let ta = a.poll_transmit(now, buf_a);
        let tb = b.poll_transmit(now, buf_b);
        assert_eq!(ta, tb);
        match ta {
            Some(t) => assert_eq!(buf_a[..t.len], buf_b[..t.len]),
            None => break,
        }
    }
}

fn run(
    dynamic_marking: bool,
    which: u8,
    mode: u8,
    max_peers: usize,
    defaults: PeerConfig,
    ops: Vec<Op>,
) {
    let cfg = EngineConfig {
        max_peers,
        peer_defaults: defaults,
        link_mode: match mode {
            0 => LinkMode::Fixed,
            1 => LinkMode::HoldWhileBusy,
            _ => LinkMode::Adaptive(Default::default()),
        },
        classifier: classifier(which),
        dynamic_marking,
        bypass_queue_limit: 16,
    };
    let mut a = Engine::new(cfg.clone());
    let mut b = Engine::new(cfg);
    b.general_only = true;
    let (mut buf_a, mut buf_b) = (vec![0u8; 4096], vec![0u8; 4096]);
    let mut now = 0;
    for op in &ops {
        match op {
            Op::Packet(p, k, mark) => {
                let bytes = bytes(k);
                let va = a.handle_packet(now, key(*p), &bytes, *mark);
                let vb = b.handle_packet(now, key(*p), &bytes, *mark);
                assert_eq!(va, vb, "{k:?}");
            }
            Op::Advance(dt) => {
                now += dt;
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            Op::Link(busy) => {
                a.set_link_busy(now, *busy);
                b.set_link_busy(now, *busy);
            }
            Op::MaxSize(p, m) => {
                a.set_peer_max_size(key(*p), *m);
                b.set_peer_max_size(key(*p), *m);
            }
            Op::SetPeer(p, c) => {
                assert_eq!(
                    a.set_peer(key(*p), c.clone()),
                    b.set_peer(key(*p), c.clone())
                );
            }
            Op::Remove(p) => {
                a.remove_peer(key(*p));
                b.remove_peer(key(*p));
            }
            Op::Flush => {
                a.flush();
                b.flush();
            }
        }
        same_state(&mut a, &mut b);
        // Drain only sometimes, so queues also fill up to their limits.
        if !matches!(op, Op::Packet(..)) || now % 3 == 0 {
            drain(&mut a, &mut b, now, &mut buf_a, &mut buf_b);
            same_state(&mut a, &mut b);
        }
    }
    a.flush();
    b.flush();
    drain(&mut a, &mut b, now, &mut buf_a, &mut buf_b);
    same_state(&mut a, &mut b);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_matches_general_path(
        dynamic_marking in any::<bool>(),
        which in 0u8..4,
        mode in 0u8..3,
        max_peers in prop_oneof![1 => 1usize..PEERS as usize, 3 => Just(PEERS as usize)],
        defaults in peer_config(),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        run(dynamic_marking, which, mode, max_peers, defaults, ops);
    }
}

/// The comparison above is not vacuous: with voice traffic most packets do
/// take the fast path (its verdicts are those of the general path, and the
/// general-only engine never takes it).
#[test]
fn voice_takes_the_fast_path() {
    let mut e = Engine::new(EngineConfig {
        classifier: classifier(0),
        ..EngineConfig::default()
    });
    let p = bytes(&Pkt::Udp4 {
        sport: 16384,
        dport: 16386,
        dscp: 46,
        len: 60,
        frag: 0,
        ihl: 5,
        bad_sum: false,
    });
    assert!(ip::udp4(&p).is_some());
    let k = key(0);
    assert_eq!(
        e.handle_packet(0, k, &p, 0),
        Verdict::Queued(TrafficClass::Bundle)
    );
    // The peer exists now, so the next packet is eligible for the fast path.
    assert!(e.index.get(&k).is_some());
    assert!(e.fast_path_on());
    assert_eq!(
        e.handle_packet(0, k, &p, 0),
        Verdict::Queued(TrafficClass::Bundle)
    );
    assert_eq!(e.peer_queued(k), Some((2, 120)));
}
