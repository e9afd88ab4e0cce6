//! Fuzz target: the seed-002 downlink frame parser and a station's
//! demultiplexer on untrusted bytes. An accepted frame re-encodes to the same
//! bytes; every packet a station rebuilds is a valid IPv4 packet.
#![no_main]
use airpack_core::downlink::demux::{Demux, DemuxConfig, MAX_REBUILT};
use airpack_core::downlink::mux::Format;
use airpack_core::downlink::seed::{self, SeedWriter};
use airpack_core::wire::ip;
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};

fuzz_target!(|data: &[u8]| {
    let mut d = Demux::new(DemuxConfig {
        format: Format::Seed,
        seed_ttl: 64,
    });
    d.add_stream(0, IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)), 0);
    d.add_stream(1, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)), 6600);
    let mut scratch = vec![0u8; MAX_REBUILT];
    let r = d.handle_frame(data, &mut scratch, |p| assert!(ip::inspect(p).is_ok()));
    let Ok(f) = seed::decode(data) else {
        assert!(r.is_err());
        return;
    };
    assert_eq!(r.is_ok(), true);
    let mut out = vec![0u8; data.len()];
    let mut w = SeedWriter::new(&mut out).expect("count fits");
    for p in f.iter() {
        w.push(&p).expect("accepted packet re-encodes");
    }
    let n = w.finish();
    assert_eq!(&out[..n], data);
});
