//! Fuzz target: the strict RTP parser of airpack-voice on untrusted bytes.
//! A packet that parses must lie inside the input, and its header must
//! re-encode and parse back to the same fields and payload.
#![no_main]
use airpack_voice::rtp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = rtp::parse(data) else { return };
    let start = data.as_ptr() as usize;
    let pay = p.payload.as_ptr() as usize;
    assert!(pay >= start && pay + p.payload.len() <= start + data.len());
    let mut out = vec![0u8; rtp::HEADER_LEN + p.payload.len()];
    let n = rtp::write(&p.header, p.payload, &mut out).expect("fits");
    let q = rtp::parse(&out[..n]).expect("re-encoded packet parses");
    assert_eq!(q.header, p.header);
    assert_eq!(q.payload, p.payload);
});
