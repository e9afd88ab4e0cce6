//! Fuzz target: the gateway's strict TCP/IP parser (airpack-core
//! gateway::tcp) on untrusted bytes, then the window rewrite and the flow
//! table. A segment that parses lies inside the input; rewriting its window
//! keeps a correct checksum correct (RFC 1624 incremental == full
//! recompute); the flow table never panics and stays bounded.
#![no_main]
use airpack_core::gateway::tcp::{self, flags};
use airpack_core::gateway::tcp_flow::{rewritten_window, FlowConfig, FlowKey, FlowTable, Side};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&w, packet)) = data.split_first() else { return };
    let Ok(s) = tcp::parse(packet) else { return };
    assert_eq!(s.tcp_offset + s.header_len + s.payload_len, packet.len());
    assert!(s.options.sack_len <= 4 && s.options.wscale.map_or(true, |x| x <= tcp::MAX_WSCALE));
    let valid = tcp::full_checksum(packet) == Some(s.checksum);
    let mut p = packet.to_vec();
    let new = u16::from(w) * 257;
    assert_eq!(tcp::set_window(&mut p, &s, new), Some(s.window));
    let s2 = tcp::parse(&p).expect("only the window and checksum changed");
    assert_eq!(s2.window, new);
    if valid {
        assert_eq!(tcp::full_checksum(&p), Some(s2.checksum));
    }
    // The flow table, with the segment from either side.
    let mut t = FlowTable::new(FlowConfig { max_flows: 2, ..FlowConfig::default() });
    let key = FlowKey { client: (s.src, s.src_port), server: (s.dst, s.dst_port) };
    for (i, side) in [Side::Client, Side::Server, Side::Client].into_iter().enumerate() {
        let (st, _) = t.on_segment(key, side, &s, i as u64);
        if let Some(st) = st {
            if let Some(win) = rewritten_window(&st, &s, u32::from(w)) {
                assert!(win <= s.window && !s.has(flags::SYN));
            }
        }
        assert!(t.len() <= 2);
    }
});
