//! Fuzz target: the gateway's TCP Improvement Module (airpack-core
//! gateway::tim) on a stream of untrusted packets in both directions, as the
//! daemon hands them over. Never panics; every packet is forwarded or
//! dropped (the accounting identity); a packet whose TCP checksum was right
//! is still right after any rewrite (window, hop limit); what the module
//! emits (local retransmissions, replayed ACKs) parses; the flow table stays within its bound.
#![no_main]
use airpack_core::gateway::tcp;
use airpack_core::gateway::tcp_flow::FlowConfig;
use airpack_core::gateway::tim::{Direction, Tim, TimConfig, Verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut tim = Tim::new(TimConfig {
        flows: FlowConfig {
            max_flows: 3,
            ..FlowConfig::default()
        },
        compensate_hop: true,
        ..TimConfig::default()
    });
    // Records: [flags, len, bytes...]: flags bit 0 = direction, bits 1-7 =
    // time step (ms), share from the high bits.
    let mut rest = data;
    let mut now = 0u64;
    let mut n = 0u64;
    while let [f, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (pkt, next) = tail.split_at(len);
        rest = next;
        let dir = if f & 1 == 0 {
            Direction::IntoMesh
        } else {
            Direction::FromMesh
        };
        now += u64::from(f >> 1) * 1000;
        let share = if f & 0x80 != 0 { 0 } else { 1_000_000 };
        let mut p = pkt.to_vec();
        let valid =
            tcp::full_checksum(&p).is_some_and(|c| tcp::parse(&p).map(|s| s.checksum) == Ok(c));
        // Emitted packets are copies of packets handed in earlier (a
        // retransmission as it was forwarded, the latest pure ACK).
        let v = tim.on_packet(dir, &mut p, now, share, |_, e| {
            tcp::parse(e).expect("emitted packets parse");
        });
        n += 1;
        if v == Verdict::Forward && valid {
            let s = tcp::parse(&p).expect("a rewrite keeps the packet parsable");
            assert_eq!(tcp::full_checksum(&p), Some(s.checksum));
        }
        assert!(tim.flows() <= 3);
        tim.expire(now);
    }
    let c = tim.counters();
    assert_eq!(c.into_mesh + c.from_mesh, n);
    assert_eq!(n, c.forwarded + c.dropped_redundant);
});
