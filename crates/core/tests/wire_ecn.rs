//! ECN across a bundle (RFC 6040, applied to a bundle as a whole), partial
//! damage and nesting on receive, through the public API:
//! * the engine reports the outer ECN of each bundle (`Transmit::ecn`):
//!   ECT(0) only when every packet inside is ECN-capable, on the fast and the
//!   general path, for a whole queue and for a bundle that takes only part of it;
//! * `decode_rx` applies the decapsulation table to the inner packets in place
//!   (IPv4 checksums stay valid), refuses a Not-ECT packet under an outer CE
//!   and an inner UDP packet to the bundle port, and the engine counts each
//!   refused inner packet by reason while the others are delivered.
//!
//! Owns nothing but these checks.

mod engine_common;

use airpack_core::engine::{
    Classifier, Engine, EngineConfig, PeerConfig, Rule, TrafficClass, TransmitKind,
};
use airpack_core::wire::ip::{self, ecn};
use airpack_core::wire::{BundleWriter, DecodeError, Encoding, RxContext, MAX_BUNDLE};
use engine_common::*;

/// `p` with its ECN field set to `e` (checksum kept valid).
fn with_ecn(mut p: Vec<u8>, e: u8) -> Vec<u8> {
    ip::set_ecn(&mut p, e);
    assert_eq!(ip::inspect(&p).err(), None, "{p:02x?}");
    assert_eq!(ip::ecn_of(&p), e);
    p
}

fn bundle(enc: Encoding, pkts: &[Vec<u8>]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_BUNDLE];
    let mut w = BundleWriter::new(enc, &mut buf).unwrap();
    for p in pkts {
        w.push(p).unwrap();
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

#[test]
fn set_ecn_keeps_the_ipv4_checksum_valid() {
    for dscp in [0u8, 10, 46, 63] {
        for tag in 0..50 {
            let p = udp4(60 + tag as usize, dscp, tag);
            for e in [ecn::NOT_ECT, ecn::ECT1, ecn::ECT0, ecn::CE] {
                let q = with_ecn(p.clone(), e);
                assert_eq!(ip::checksum(&q[..20]), 0);
                assert_eq!(q[1] >> 2, dscp, "DSCP untouched");
                assert_eq!(q[..1], p[..1]);
                assert_eq!(q[2..10], p[2..10]);
                assert_eq!(q[12..], p[12..]);
            }
        }
        let p6 = udp6(80, dscp, 1);
        for e in 0..4 {
            let q = with_ecn(p6.clone(), e);
            assert_eq!(
                ip::inspect(&q).unwrap().dscp,
                ip::inspect(&p6).unwrap().dscp
            );
            assert_eq!(q[2..], p6[2..]);
        }
    }
}

#[test]
fn decapsulation_table_is_rfc_6040() {
    use ecn::*;
    let table = [
        // inner, [outer Not-ECT, ECT(0), ECT(1), CE]
        (NOT_ECT, [Some(NOT_ECT), Some(NOT_ECT), Some(NOT_ECT), None]),
        (ECT0, [Some(ECT0), Some(ECT0), Some(ECT1), Some(CE)]),
        (ECT1, [Some(ECT1), Some(ECT1), Some(ECT1), Some(CE)]),
        (CE, [Some(CE), Some(CE), Some(CE), Some(CE)]),
    ];
    for (inner, row) in table {
        for (outer, want) in [NOT_ECT, ECT0, ECT1, CE].into_iter().zip(row) {
            assert_eq!(ip::ecn_decapsulate(outer, inner), want, "{outer} {inner}");
        }
    }
}

fn engine(enc: Encoding) -> Engine {
    let mut e = Engine::new(EngineConfig {
        classifier: Classifier {
            rules: vec![Rule {
                class: TrafficClass::Bundle,
                protocol: Some(UDP),
                ..Rule::default()
            }],
            default: TrafficClass::Bypass,
        },
        ..EngineConfig::default()
    });
    e.set_peer(
        peer(1),
        PeerConfig {
            encoding: enc,
            ..PeerConfig::default()
        },
    )
    .unwrap();
    e
}

/// Hands `pkts` to a fresh engine and returns the (outer ECN, inner packets)
/// of each bundle sent after the hold time.
fn bundles_of(enc: Encoding, pkts: &[Vec<u8>]) -> Vec<(u8, usize)> {
    let mut e = engine(enc);
    for p in pkts {
        e.handle_packet(0, peer(1), p, 0);
    }
    let mut buf = vec![0u8; 65_535];
    let mut out = Vec::new();
    while let Some(t) = e.poll_transmit(1_000_000, &mut buf) {
        match t.kind {
            TransmitKind::Bundle { packets, .. } => out.push((t.ecn, usize::from(packets))),
            _ => assert_eq!(t.ecn, 0),
        }
    }
    out
}

#[test]
fn outer_ecn_is_ect0_only_when_every_inner_packet_is_ecn_capable() {
    for enc in Encoding::ALL {
        // Fast path (UDP/IPv4) and general path (IPv6, except kau).
        let mk = |i: u32, e: u8| -> Vec<u8> {
            if enc != Encoding::Kau && i % 3 == 2 {
                with_ecn(udp6(80, 46, i), e)
            } else {
                with_ecn(udp4(60, 46, i), e)
            }
        };
        let capable: Vec<Vec<u8>> = (0..6)
            .map(|i| mk(i, [ecn::ECT0, ecn::ECT1, ecn::CE][i as usize % 3]))
            .collect();
        assert_eq!(bundles_of(enc, &capable), [(ecn::ECT0, 6)], "{enc}");
        for bad in 0..6 {
            let mut pkts = capable.clone();
            pkts[bad] = mk(bad as u32, ecn::NOT_ECT);
            assert_eq!(bundles_of(enc, &pkts), [(ecn::NOT_ECT, 6)], "{enc} {bad}");
        }
    }
    // A queue larger than one bundle (the walk that takes part of it): each
    // bundle's ECN follows its own packets. 1500-byte maximum: 23 of 60 bytes.
    let mut pkts: Vec<Vec<u8>> = (0..46)
        .map(|i| with_ecn(udp4(60, 46, i), ecn::ECT0))
        .collect();
    pkts[30] = udp4(60, 46, 30);
    let mut e = engine(Encoding::Native);
    let mut buf = vec![0u8; 65_535];
    let mut got = Vec::new();
    for (i, p) in pkts.iter().enumerate() {
        e.handle_packet(i as u64, peer(1), p, 0);
        while let Some(t) = e.poll_transmit(i as u64, &mut buf) {
            got.push((t.ecn, t.kind));
        }
    }
    e.flush();
    while let Some(t) = e.poll_transmit(100, &mut buf) {
        got.push((t.ecn, t.kind));
    }
    let ecns: Vec<(u8, u16)> = got
        .iter()
        .map(|(e, k)| match k {
            TransmitKind::Bundle { packets, .. } => (*e, *packets),
            _ => (*e, 1),
        })
        .collect();
    let total: u16 = ecns.iter().map(|x| x.1).sum();
    assert_eq!(total, 46);
    let mut at = 0usize;
    for (e, n) in ecns {
        let all = pkts[at..at + n as usize]
            .iter()
            .all(|p| ip::ecn_of(p) != ecn::NOT_ECT);
        if n >= 2 {
            assert_eq!(e, if all { ecn::ECT0 } else { ecn::NOT_ECT }, "at {at}");
        }
        at += n as usize;
    }
}

#[test]
fn outer_ce_marks_ect_inner_packets_and_refuses_not_ect_ones() {
    for enc in Encoding::ALL {
        let mut pkts = vec![
            with_ecn(udp4(60, 46, 1), ecn::ECT0),
            with_ecn(udp4(61, 46, 2), ecn::ECT1),
            with_ecn(udp4(62, 46, 3), ecn::CE),
            udp4(63, 46, 4),
        ];
        if enc != Encoding::Kau {
            pkts.push(with_ecn(udp6(80, 46, 5), ecn::ECT0));
        }
        let b = bundle(enc, &pkts);
        // Outer CE: every ECT packet becomes CE, the Not-ECT one is refused.
        let mut e = engine(enc);
        let mut rx = b.clone();
        let got: Vec<Vec<u8>> = e
            .receive_rx(
                peer(1),
                &mut rx,
                RxContext {
                    outer_ecn: ecn::CE,
                    udp_port: None,
                },
            )
            .expect("a known peer")
            .unwrap()
            .iter()
            .map(<[u8]>::to_vec)
            .collect();
        let want: Vec<Vec<u8>> = pkts
            .iter()
            .filter(|p| ip::ecn_of(p) != ecn::NOT_ECT)
            .map(|p| with_ecn(p.clone(), ecn::CE))
            .collect();
        assert_eq!(got, want, "{enc}");
        let c = &e.peer_stats(peer(1)).unwrap().counters;
        assert_eq!(c.packets_received, want.len() as u64);
        assert_eq!(c.inner_errors[DecodeError::CeOnNotEct.index()], 1);
        assert_eq!(c.inner_errors.iter().sum::<u64>(), 1);
        // Outer ECT(1): ECT(0) becomes ECT(1); nothing refused.
        let mut rx = b.clone();
        let d = enc
            .decode_rx(
                &mut rx,
                RxContext {
                    outer_ecn: ecn::ECT1,
                    udp_port: None,
                },
            )
            .unwrap();
        let ecns: Vec<u8> = d.iter().map(ip::ecn_of).collect();
        let want: Vec<u8> = pkts
            .iter()
            .map(|p| ip::ecn_decapsulate(ecn::ECT1, ip::ecn_of(p)).unwrap())
            .collect();
        assert_eq!(ecns, want, "{enc}");
        for p in d.iter() {
            assert!(ip::inspect(p).is_ok());
        }
        // Outer Not-ECT / ECT(0): the bytes are untouched.
        for outer in [ecn::NOT_ECT, ecn::ECT0] {
            let mut rx = b.clone();
            let n = enc
                .decode_rx(
                    &mut rx,
                    RxContext {
                        outer_ecn: outer,
                        udp_port: None,
                    },
                )
                .unwrap()
                .len();
            assert_eq!(n, pkts.len());
            assert_eq!(rx, b);
        }
    }
}

#[test]
fn inner_udp_to_the_bundle_port_is_refused_as_nested() {
    let port = 4150;
    for enc in Encoding::ALL {
        let to_port = ipv4(UDP, 5000, port, 0, 60, 9, 0);
        let from_port = ipv4(UDP, port, 5000, 0, 60, 10, 0);
        let pkts = vec![udp4(60, 46, 1), to_port, from_port.clone(), udp4(60, 46, 2)];
        let b = bundle(enc, &pkts);
        let mut e = engine(enc);
        let mut rx = b.clone();
        let ctx = RxContext {
            outer_ecn: 0,
            udp_port: Some(port),
        };
        let got: Vec<Vec<u8>> = e
            .receive_rx(peer(1), &mut rx, ctx)
            .unwrap()
            .unwrap()
            .iter()
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(got, [pkts[0].clone(), from_port, pkts[3].clone()], "{enc}");
        let c = &e.peer_stats(peer(1)).unwrap().counters;
        assert_eq!(c.inner_errors[DecodeError::Nested.index()], 1);
        assert_eq!((c.bundles_received, c.packets_received), (1, 3));
        // Without a UDP port (raw IP transport) the same packet is delivered.
        assert_eq!(enc.decode(&b).unwrap().len(), 4);
    }
}

#[test]
fn mixed_simplemux_bundle_with_a_protocol_4_ipv6_packet_delivers_all() {
    // 20 IPv4 packets and one IPv6 packet, every separator labelled 4 (as the
    // published Simplemux sends IPv6), hand-built: all 21 delivered in order.
    let mut pkts: Vec<Vec<u8>> = (0..20).map(|i| udp4(60, 46, i)).collect();
    pkts.insert(11, udp6(80, 46, 99));
    let mut b = Vec::new();
    for (i, p) in pkts.iter().enumerate() {
        // Lengths 60 and 80 fit one length byte (first: < 64; later: < 128).
        assert!(p.len() < if i == 0 { 64 } else { 128 });
        b.push(p.len() as u8);
        b.push(4);
        b.extend_from_slice(p);
    }
    let mut e = engine(Encoding::Simplemux);
    let d = e.receive(peer(1), &b).unwrap().unwrap();
    assert_eq!((d.len(), d.framed()), (21, 21));
    assert!(d.iter().eq(pkts.iter().map(|p| &p[..])));
    // One damaged IPv4 packet among them costs only itself.
    let mut bad = b.clone();
    let at = 2 + 60 + 2 + 8; // TTL of the second packet
    bad[at] ^= 0xff;
    let d = e.receive(peer(1), &bad).unwrap().unwrap();
    assert_eq!((d.len(), d.framed()), (20, 21));
    assert_eq!(
        d.refused().collect::<Vec<_>>(),
        [DecodeError::BadIpv4Checksum]
    );
    let c = &e.peer_stats(peer(1)).unwrap().counters;
    assert_eq!((c.bundles_received, c.packets_received), (2, 41));
    assert_eq!(c.inner_errors[DecodeError::BadIpv4Checksum.index()], 1);
}
