//! Property tests for the hello format: any header and entry list round-trips
//! through the writer and the parser (with and without a key), the writer
//! never writes past its buffer and what it wrote always parses, random and
//! mutated bytes never panic the parser, and whatever it accepts re-encodes to
//! the same bytes (the format has one encoding per message).
//!
//! Owns these checks only.

use airpack_core::auth::Key;
use airpack_core::neighbor::hello::{
    Encodings, Hello, HelloHeader, HelloWriter, NeighborEntry, Radio, WriteError, MAX_ENTRIES,
    MAX_HELLO,
};
use proptest::prelude::*;
use std::net::IpAddr;

fn header() -> impl Strategy<Value = HelloHeader> {
    (any::<u64>(), any::<u64>(), 1u16..=u16::MAX, any::<u8>()).prop_map(
        |(sender, seq, interval_ms, enc)| HelloHeader {
            sender,
            seq,
            interval_ms,
            encodings: Encodings(enc),
        },
    )
}

fn entry() -> impl Strategy<Value = NeighborEntry> {
    (
        any::<u64>(),
        prop_oneof![
            any::<[u8; 4]>().prop_map(IpAddr::from),
            any::<[u8; 16]>().prop_map(IpAddr::from)
        ],
        any::<u8>(),
        any::<u16>(),
        proptest::option::of((any::<i8>(), any::<i8>())),
    )
        .prop_map(|(id, addr, rx_ratio, max_bundle, radio)| NeighborEntry {
            id,
            addr,
            rx_ratio,
            max_bundle,
            radio: radio.map(|(signal_dbm, noise_dbm)| Radio {
                signal_dbm,
                noise_dbm,
            }),
        })
}

/// Writes as many of `entries` as fit; returns the length and how many went in.
fn write(
    buf: &mut [u8],
    h: &HelloHeader,
    entries: &[NeighborEntry],
    auth: Option<(u8, &Key)>,
) -> Option<(usize, usize)> {
    let mut w = HelloWriter::new(buf, h, auth).ok()?;
    let mut n = 0;
    for e in entries {
        match w.push(e) {
            Ok(()) => n += 1,
            Err(WriteError::BufferTooSmall | WriteError::TooManyEntries) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    Some((w.finish(), n))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn roundtrip(h in header(), entries in prop::collection::vec(entry(), 0..40),
                 key in proptest::option::of((any::<u8>(), any::<[u8; 16]>()))) {
        let key = key.map(|(id, k)| (id, Key::from_bytes(k)));
        let mut buf = vec![0u8; MAX_HELLO];
        let (len, n) = write(&mut buf, &h, &entries, key.as_ref().map(|(i, k)| (*i, k))).unwrap();
        prop_assert_eq!(n, entries.len());
        let p = Hello::parse(&buf[..len]).unwrap();
        prop_assert_eq!(p.header, h);
        prop_assert_eq!(p.neighbors().collect::<Vec<_>>(), entries);
        match &key {
            Some((id, k)) => {
                prop_assert!(p.verify(*id, k));
                prop_assert!(!p.verify(id.wrapping_add(1), k));
            }
            None => prop_assert!(p.auth.is_none()),
        }
    }

    #[test]
    fn writer_stays_in_its_buffer(h in header(), entries in prop::collection::vec(entry(), 0..300),
                                  size in 0usize..2000, auth in any::<bool>()) {
        let key = Key::from_bytes([7; 16]);
        // Sentinel bytes after the buffer the writer is given.
        let mut buf = vec![0xa5u8; size + 64];
        let out = write(&mut buf[..size], &h, &entries, auth.then_some((9, &key)));
        prop_assert!(buf[size..].iter().all(|&b| b == 0xa5));
        if let Some((len, n)) = out {
            prop_assert!(len <= size);
            prop_assert!(n <= MAX_ENTRIES);
            let p = Hello::parse(&buf[..len]).unwrap();
            prop_assert_eq!(p.neighbors().collect::<Vec<_>>(), &entries[..n]);
            prop_assert_eq!(p.auth.is_some(), auth);
        }
    }

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(p) = Hello::parse(&b) {
            reencodes(&p, &b);
        }
    }

    #[test]
    fn mutated_hellos_never_panic(h in header(), entries in prop::collection::vec(entry(), 0..10),
                                  auth in any::<bool>(),
                                  muts in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                                  cut in any::<prop::sample::Index>()) {
        let key = Key::from_bytes([3; 16]);
        let mut buf = vec![0u8; MAX_HELLO];
        let (len, _) = write(&mut buf, &h, &entries, auth.then_some((1, &key))).unwrap();
        let mut b = buf[..len].to_vec();
        for (i, v) in muts {
            let i = i.index(b.len());
            b[i] = v;
        }
        let end = cut.index(b.len() + 1);
        for s in [&b[..], &b[..end]] {
            if let Ok(p) = Hello::parse(s) {
                reencodes(&p, s);
            }
        }
    }
}

/// An accepted hello is written back byte for byte (may-ignore bits in the
/// flags byte are the one thing the writer does not reproduce).
fn reencodes(p: &Hello<'_>, original: &[u8]) {
    let entries: Vec<_> = p.neighbors().collect();
    assert_eq!(entries.len(), p.len());
    let mut buf = vec![0u8; MAX_HELLO];
    // The tag is not recomputed (no key): compare everything before it.
    let (len, n) = write(&mut buf, &p.header, &entries, None).unwrap();
    assert_eq!(n, entries.len());
    let body = len;
    let mut expect = original[..body].to_vec();
    expect[1] &= !0xf0; // may-ignore flags are sent as 0
    expect[1] &= !0x01; // written without the trailer here
    assert_eq!(&buf[..body], &expect[..], "re-encoding differs");
    match p.auth {
        Some((id, tag)) => {
            assert_eq!(original.len(), body + 1 + tag.len());
            assert_eq!(original[body], id);
        }
        None => assert_eq!(original.len(), body),
    }
}
