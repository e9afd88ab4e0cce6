//! Fuzz target: the compact downlink frame parser and a station's
//! demultiplexer (IPv4 and IPv6 streams, contexts carried across inputs'
//! halves) on untrusted bytes. An accepted frame re-encodes to the same
//! bytes (its own entries and each repeat block's apart); every packet a
//! station rebuilds is a valid IP packet.
#![no_main]
use airpack_core::downlink::compact::{self, CompactWriter};
use airpack_core::downlink::demux::{Demux, DemuxConfig, MAX_REBUILT};
use airpack_core::wire::ip;
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fuzz_target!(|data: &[u8]| {
    let mut d = Demux::new(DemuxConfig::default());
    d.set_epoch(data.get(1).copied().unwrap_or(0));
    for sid in 0..4u16 {
        d.add_stream(sid, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)), 6600 + sid);
        d.add_stream(200 + sid, IpAddr::V6(Ipv6Addr::LOCALHOST), 7000 + sid);
    }
    let mut scratch = vec![0u8; MAX_REBUILT];
    // The whole input as one frame, then its two halves as two frames (a
    // full entry in one may set a context the other expands against).
    let mid = data.len() / 2;
    for part in [data, &data[..mid], &data[mid..]] {
        let _ = d.handle_frame(part, &mut scratch, |p| assert!(ip::inspect(p).is_ok()));
    }
    let Ok(f) = compact::decode(data) else { return };
    let mut out = vec![0u8; data.len()];
    let mut w = CompactWriter::new(&mut out, f.header).expect("header fits");
    for e in f.iter() {
        w.push(&e).expect("accepted entry re-encodes");
    }
    assert_eq!(w.count(), f.len());
    let n = w.finish();
    if data[0] & compact::FLAG_REPEAT == 0 {
        assert_eq!(&out[..n], data);
        return;
    }
    // With repeat blocks: the writer makes header + own entries (no
    // block), which are the input's header without the flags and its tail;
    // each block's entries re-encode to the block's bytes (after the count
    // byte of the depth flag, each block is its 2-byte length and entries).
    let own = n - 4;
    let flags = compact::FLAG_REPEAT | compact::FLAG_DEPTH;
    let mut want = vec![data[0] & !flags, data[1], data[2], data[3]];
    want.extend_from_slice(&data[data.len() - own..]);
    assert_eq!(&out[..n], &want[..]);
    let mut at = if data[0] & compact::FLAG_DEPTH != 0 {
        5
    } else {
        4
    };
    let mut total = 0;
    let mut ages = Vec::new();
    for (age, block) in f.blocks() {
        ages.push(age);
        let rlen = usize::from(u16::from_be_bytes([data[at], data[at + 1]]));
        let mut rout = vec![0u8; data.len()];
        let mut rw = CompactWriter::new(&mut rout, f.header).expect("header fits");
        for e in block {
            rw.push(&e).expect("accepted repeated entry re-encodes");
        }
        total += rw.count();
        let rn = rw.finish();
        assert_eq!(&rout[4..rn], &data[at + 2..at + 2 + rlen]);
        at += 2 + rlen;
    }
    assert_eq!(total, f.repeated_len());
    assert_eq!(ages, (1..=f.depth()).rev().collect::<Vec<_>>());
    assert_eq!(at, data.len() - own);
});
