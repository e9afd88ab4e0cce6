//! Shared check for the decode_* targets: decode untrusted bytes; whatever is
//! accepted must be valid packets that re-encode and decode to the same list.

use airpack_core::wire::{ip, BundleWriter, Encoding, MAX_BUNDLE};

pub fn check(enc: Encoding, data: &[u8]) {
    let Ok(bundle) = enc.decode(data) else { return };
    assert!(!bundle.is_empty());
    assert_eq!(bundle.iter().count(), bundle.len());
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
    // Canonical formats: the same bytes back (native modulo its may-ignore flags).
    match enc {
        Encoding::Kau => assert_eq!(&buf[..n], data),
        Encoding::Native => {
            assert_eq!(buf[0], data[0]);
            assert_eq!(&buf[2..n], &data[2..]);
        }
        Encoding::Simplemux => {
            if data[0] & 0x80 == 0 {
                assert_eq!(&buf[..n], data);
            }
        }
    }
}
