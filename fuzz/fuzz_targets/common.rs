//! Shared check for the decode_* targets: decode untrusted bytes; whatever is
//! delivered must be valid packets that re-encode and decode to the same
//! list; every framed packet is delivered or refused for one reason; the
//! receive path with an outer CE and a UDP bundle port never panics and
//! delivers only CE-marked, valid packets.

use airpack_core::wire::{ip, BundleWriter, Encoding, RxContext, MAX_BUNDLE};

pub fn check(enc: Encoding, data: &[u8]) {
    let Ok(bundle) = enc.decode(data) else { return };
    assert!(bundle.framed() > 0);
    assert_eq!(bundle.iter().count(), bundle.len());
    assert_eq!(bundle.refused().count() + bundle.len(), bundle.framed());
    let mut copy = data.to_vec();
    let ctx = RxContext {
        outer_ecn: ip::ecn::CE,
        udp_port: Some(4150),
    };
    let rx = enc.decode_rx(&mut copy, ctx).expect("same framing");
    assert_eq!(rx.framed(), bundle.framed());
    for p in rx.iter() {
        assert!(ip::inspect(p).is_ok());
        assert_eq!(ip::ecn_of(p), ip::ecn::CE);
    }
    if bundle.is_empty() {
        return;
    }
    let mut buf = vec![0u8; MAX_BUNDLE];
    let mut w = BundleWriter::new(enc, &mut buf).expect("header fits");
    for p in bundle.iter() {
        let info = ip::inspect(p).expect("accepted inner packet is valid");
        assert_eq!(info.len, p.len());
        assert!(!ip::is_bundle_protocol(info.protocol));
        w.push(p).expect("accepted packet re-encodes");
    }
    let n = w.finish();
    // A re-encoding is never longer than the input, except that simplemux
    // always writes SPB = 0 (one Protocol byte per packet) where the input may
    // have used SPB = 1.
    if enc != Encoding::Simplemux {
        assert!(n <= data.len());
    }
    let again = enc.decode(&buf[..n]).expect("re-encoded bundle decodes");
    assert!(again.iter().eq(bundle.iter()), "re-encoded bundle differs");
    // Canonical formats: the same bytes back (native modulo its may-ignore
    // flags), when every framed packet was delivered (a refused one is not
    // re-encoded).
    if bundle.len() != bundle.framed() {
        return;
    }
    match enc {
        Encoding::Kau => assert_eq!(&buf[..n], data),
        Encoding::Native => {
            assert_eq!(buf[0], data[0]);
            assert_eq!(&buf[2..n], &data[2..]);
        }
        Encoding::Simplemux => {
            if data[0] & 0x80 == 0 {
                // The same bytes, except that a Protocol label contradicting
                // the packet's version nibble (IPv6 labelled 4, IPv4
                // labelled 41: delivered by the nibble) is written correctly.
                assert_eq!(n, data.len());
                for (a, b) in buf[..n].iter().zip(data) {
                    assert!(a == b || matches!((a, b), (4, 41) | (41, 4)), "{a} vs {b}");
                }
            }
        }
    }
}
