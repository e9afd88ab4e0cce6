//! Property tests for the wire layer: every encoding round-trips any list of
//! valid IPv4/IPv6 packets it can carry, in order, never writing past the
//! buffer; random or mutated bytes never panic a decoder, and whatever a
//! decoder accepts is a list of valid packets that re-encodes to the same list.
//!
//! Owns these checks only.

use airpack_core::wire::{
    ip, BundleWriter, EncodeError, Encoding, RxContext, MAX_BUNDLE, MAX_PACKETS_PER_BUNDLE,
};
use proptest::prelude::*;

/// RFC 1071, written again here so the generator does not trust the crate.
fn csum(h: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in h.chunks(2) {
        s += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Protocols that are neither bundles nor IPv6 extension headers.
const PROTOS: [u8; 8] = [17, 6, 1, 58, 59, 132, 136, 47];

fn ipv4() -> impl Strategy<Value = Vec<u8>> {
    (
        20usize..=1500,
        0usize..=10,
        any::<[u8; 8]>(),
        any::<u16>(),
        any::<u8>(),
        0usize..PROTOS.len(),
        any::<u16>(),
        any::<u64>(),
    )
        .prop_map(|(len, opt_words, addrs, ident, tos, pi, frag, seed)| {
            let ihl = (5 + opt_words).min(len / 4);
            let mut p = vec![0u8; len];
            // Deterministic filler from the seed (cheap, no per-byte strategy).
            let mut x = seed | 1;
            for b in p.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            p[0] = 0x40 | ihl as u8;
            p[1] = tos;
            p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            p[4..6].copy_from_slice(&ident.to_be_bytes());
            p[6..8].copy_from_slice(&(frag & 0xbfff).to_be_bytes());
            p[8] = 64;
            p[9] = PROTOS[pi];
            p[10] = 0;
            p[11] = 0;
            p[12..20].copy_from_slice(&addrs);
            let c = csum(&p[..ihl * 4]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            p
        })
}

fn ipv6() -> impl Strategy<Value = Vec<u8>> {
    (
        40usize..=1500,
        any::<[u8; 32]>(),
        any::<u8>(),
        0usize..PROTOS.len(),
        any::<u64>(),
    )
        .prop_map(|(len, addrs, tc, pi, seed)| {
            let mut p = vec![0u8; len];
            let mut x = seed | 1;
            for b in p.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            p[0] = 0x60 | (tc >> 4);
            p[1] = (tc << 4) | (p[1] & 0x0f);
            p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            p[6] = PROTOS[pi];
            p[8..40].copy_from_slice(&addrs);
            p
        })
}

fn packet() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![ipv4(), ipv6()]
}

fn encoding() -> impl Strategy<Value = Encoding> {
    prop_oneof![
        Just(Encoding::Native),
        Just(Encoding::Kau),
        Just(Encoding::Simplemux)
    ]
}

/// Packs `packets` into consecutive bundles of at most `max` bytes; returns
/// (bundle bytes, packets in it). Panics on any contract breach.
fn pack(enc: Encoding, packets: &[&Vec<u8>], max: usize) -> Vec<(Vec<u8>, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < packets.len() {
        // Guard bytes after the limit catch any write past the buffer.
        let mut storage = vec![0xa5u8; max + 64];
        let (buf, guard) = storage.split_at_mut(max);
        let mut w = BundleWriter::new(enc, buf).expect("buffer holds the header");
        let mut inside = Vec::new();
        while i < packets.len() {
            let before = w.len();
            let cost = w.cost(packets[i].len());
            match w.push(packets[i]) {
                Ok(()) => {
                    assert_eq!(w.len(), before + cost, "cost() disagrees with push()");
                    inside.push(packets[i].clone());
                    i += 1;
                }
                Err(EncodeError::NoRoom) => {
                    assert!(cost > max - before, "NoRoom although it fits");
                    break;
                }
                Err(EncodeError::Unsupported) => {
                    assert_eq!(
                        w.count(),
                        MAX_PACKETS_PER_BUNDLE,
                        "{enc} refused a carryable packet"
                    );
                    break;
                }
            }
        }
        let n = w.finish();
        assert!(n <= max, "bundle of {n} exceeds {max}");
        assert!(
            guard.iter().all(|&b| b == 0xa5),
            "writer wrote past its buffer"
        );
        if inside.is_empty() {
            // A packet larger than an empty bundle can hold: it would leave alone.
            assert!(enc.can_carry(packets[i]));
            i += 1;
            continue;
        }
        out.push((buf[..n].to_vec(), inside));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn generated_packets_are_valid(p in packet()) {
        let info = ip::inspect(&p).unwrap();
        prop_assert_eq!(info.len, p.len());
    }

    #[test]
    fn round_trip(enc in encoding(), pkts in prop::collection::vec(packet(), 1..40), max in 100usize..4000) {
        let carried: Vec<&Vec<u8>> = pkts.iter().filter(|p| enc.can_carry(p)).collect();
        // kau carries IPv4 only; everything else carries both.
        for p in &pkts {
            prop_assert_eq!(enc.can_carry(p), enc != Encoding::Kau || p[0] >> 4 == 4);
        }
        let bundles = pack(enc, &carried, max);
        let mut seen = Vec::new();
        for (bytes, inside) in &bundles {
            let b = enc.decode(bytes).unwrap();
            prop_assert_eq!(b.len(), inside.len());
            prop_assert_eq!(b.iter().len(), inside.len());
            let got: Vec<Vec<u8>> = b.iter().map(<[u8]>::to_vec).collect();
            prop_assert_eq!(&got, inside);
            seen.extend(got);
        }
        // In order, and nothing lost except packets too big for an empty bundle.
        let fitting: Vec<Vec<u8>> = carried
            .iter()
            .filter(|p| {
                let mut buf = vec![0u8; max];
                let mut w = BundleWriter::new(enc, &mut buf).unwrap();
                w.push(p).is_ok()
            })
            .map(|p| (*p).clone())
            .collect();
        prop_assert_eq!(seen, fitting);
    }

    #[test]
    fn large_bundles_round_trip(enc in encoding(), pkts in prop::collection::vec(packet(), 30..80)) {
        let carried: Vec<&Vec<u8>> = pkts.iter().filter(|p| enc.can_carry(p)).collect();
        for (bytes, inside) in pack(enc, &carried, MAX_BUNDLE) {
            let got: Vec<Vec<u8>> = enc.decode(&bytes).unwrap().iter().map(<[u8]>::to_vec).collect();
            prop_assert_eq!(got, inside);
        }
    }

    #[test]
    fn can_carry_info_agrees(enc in encoding(), p in prop_oneof![packet(), prop::collection::vec(any::<u8>(), 0..100)], nest in any::<bool>()) {
        let mut p = p;
        if nest && p.len() >= 20 && p[0] >> 4 == 4 {
            // Make it a bundle protocol, checksum fixed, to cover the nested case.
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl <= p.len() && ihl >= 20 {
                p[9] = 253;
                p[10] = 0;
                p[11] = 0;
                let c = csum(&p[..ihl]);
                p[10..12].copy_from_slice(&c.to_be_bytes());
            }
        }
        let via_info = matches!(ip::inspect(&p), Ok(i) if enc.can_carry_info(&i));
        prop_assert_eq!(enc.can_carry(&p), via_info);
    }

    #[test]
    fn validate_inner_agrees_with_inspect_inner(
        p in prop_oneof![packet(), prop::collection::vec(any::<u8>(), 0..100)],
        flip in any::<prop::sample::Index>(),
        x in any::<u8>(),
    ) {
        let mut q = p.clone();
        if !q.is_empty() {
            let i = flip.index(q.len().min(48));
            q[i] ^= x;
        }
        for v in [&p, &q] {
            prop_assert_eq!(ip::validate_inner(v), ip::inspect_inner(v).map(|i| i.version));
        }
    }

    #[test]
    fn random_bytes_never_panic(enc in encoding(), bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        check_accepted(enc, &bytes);
    }

    #[test]
    fn mutated_bundles_never_panic(
        enc in encoding(),
        pkts in prop::collection::vec(packet(), 1..8),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let carried: Vec<&Vec<u8>> = pkts.iter().filter(|p| enc.can_carry(p)).collect();
        for (mut bytes, _) in pack(enc, &carried, 4000) {
            for (at, x) in &flips {
                let i = at.index(bytes.len());
                bytes[i] ^= x;
            }
            if do_cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            check_accepted(enc, &bytes);
        }
    }
}

/// Whatever a decoder delivers must be a list of valid, non-bundle packets,
/// and re-encoding them must give the same list back; every framed packet
/// is either delivered or refused for one reason.
fn check_accepted(enc: Encoding, bytes: &[u8]) {
    let Ok(b) = enc.decode(bytes) else { return };
    let pkts: Vec<&[u8]> = b.iter().collect();
    assert_eq!(pkts.len(), b.len());
    assert!(b.framed() > 0);
    assert_eq!(b.refused().count() + b.len(), b.framed());
    // The receive path with an outer CE: same framing, only CE-marked valid
    // packets delivered, the others refused.
    let mut copy = bytes.to_vec();
    let ctx = RxContext {
        outer_ecn: ip::ecn::CE,
        udp_port: Some(4150),
    };
    let rx = enc.decode_rx(&mut copy, ctx).expect("same framing");
    assert_eq!(rx.framed(), b.framed());
    assert_eq!(rx.refused().count() + rx.len(), rx.framed());
    for p in rx.iter() {
        assert!(ip::inspect(p).is_ok());
        assert_eq!(ip::ecn_of(p), ip::ecn::CE);
    }
    if pkts.is_empty() {
        return;
    }
    for p in &pkts {
        let info = ip::inspect(p).expect("accepted packet is valid");
        assert!(!ip::is_bundle_protocol(info.protocol));
        assert!(enc.can_carry(p));
    }
    let mut buf = vec![0u8; MAX_BUNDLE];
    let mut w = BundleWriter::new(enc, &mut buf).unwrap();
    for p in &pkts {
        w.push(p).unwrap();
    }
    let n = w.finish();
    let again: Vec<&[u8]> = enc.decode(&buf[..n]).unwrap().iter().collect();
    assert_eq!(again, pkts);
}

#[test]
fn writer_never_exceeds_max_bundle() {
    // A buffer longer than MAX_BUNDLE: the writer uses only MAX_BUNDLE bytes.
    let mut p = vec![0u8; 1500];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&1500u16.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    let c = csum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    for enc in Encoding::ALL {
        let mut buf = vec![0u8; 100_000];
        let mut w = BundleWriter::new(enc, &mut buf).unwrap();
        while w.push(&p).is_ok() {}
        let n = w.finish();
        assert!(n <= MAX_BUNDLE && n > MAX_BUNDLE - 1510, "{enc}: {n}");
        assert_eq!(enc.decode(&buf[..n]).unwrap().len(), 43, "{enc}");
    }
}

#[test]
fn push_checked_matches_push() {
    let mut p = vec![0u8; 60];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&60u16.to_be_bytes());
    p[9] = 17;
    let c = csum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    for enc in Encoding::ALL {
        let (mut a, mut b) = (vec![0u8; 500], vec![0u8; 500]);
        let mut wa = BundleWriter::new(enc, &mut a).unwrap();
        let mut wb = BundleWriter::new(enc, &mut b).unwrap();
        loop {
            let (ra, rb) = (wa.push(&p), wb.push_checked(&p));
            assert_eq!(ra, rb);
            if ra.is_err() {
                assert_eq!(ra, Err(EncodeError::NoRoom));
                break;
            }
        }
        let (na, nb) = (wa.finish(), wb.finish());
        assert_eq!(a[..na], b[..nb]);
    }
}
