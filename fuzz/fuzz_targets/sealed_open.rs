//! Fuzz target: the authentication trailer (`wire::sealed::open`) on
//! untrusted bytes. It never panics; whatever it accepts re-seals to the same
//! bytes; the input's bytes sealed as a bundle open to exactly themselves.
//! (That nothing opens under a key the input cannot know is not asserted:
//! libFuzzer's comparison tracing reads the computed tag out of the 64-bit
//! compare and copies it into the next input, which no sender on the radio
//! can do. A seeded run found exactly that.)
#![no_main]
use airpack_core::auth::Key;
use airpack_core::wire::sealed::{open, seal, Opened, TRAILER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = Key::from_bytes(*b"fuzzer-never-kno");
    if let Ok(o) = open(&secret, data) {
        let mut again = data.to_vec();
        let n = seal(&secret, o.node, o.seq, &mut again, o.len).expect("room");
        assert_eq!(&again[..n], data);
    }
    // Round trip: the input's bytes as a bundle, sealed and opened again.
    if data.is_empty() {
        return;
    }
    let mut buf = data.to_vec();
    buf.resize(data.len() + TRAILER_LEN, 0);
    let node = data.len() as u32;
    let seq = u64::from(data[0]) << 40 | data.len() as u64;
    let n = seal(&secret, node, seq, &mut buf, data.len()).expect("room");
    assert_eq!(n, data.len() + TRAILER_LEN);
    assert_eq!(
        open(&secret, &buf),
        Ok(Opened {
            node,
            seq,
            len: data.len()
        })
    );
    assert_eq!(&buf[..data.len()], data);
});
