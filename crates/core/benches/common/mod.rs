//! The benchmark workload shared by `benches/engine.rs` (criterion, wall
//! clock) and `examples/bench_count.rs` (callgrind instruction counts):
//! 60-byte UDP/IPv4 packets spread round robin over N peers, each one
//! classified, queued, bundled (native encoding, default 1400/1500-byte
//! min/max, so about 22 packets per bundle) and split again by the receiver's
//! decoder. Bench-only; owns no engine logic.

use airpack_core::engine::{Classifier, Engine, EngineConfig, Rule, TrafficClass, TransmitKind};
use airpack_core::wire::ip::checksum;
use core::net::{IpAddr, Ipv4Addr};

/// A 60-byte UDP/IPv4 packet with a valid header checksum.
pub fn packet(tag: u16) -> Vec<u8> {
    let mut p = vec![0u8; 60];
    p[0] = 0x45;
    p[1] = 46 << 2;
    p[2..4].copy_from_slice(&60u16.to_be_bytes());
    p[4..6].copy_from_slice(&tag.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&16384u16.to_be_bytes());
    p[22..24].copy_from_slice(&16386u16.to_be_bytes());
    p[24..26].copy_from_slice(&40u16.to_be_bytes());
    p
}

/// Engine + packets + peers for one benchmark configuration.
pub struct Workload {
    pub engine: Engine,
    packets: Vec<Vec<u8>>,
    peers: Vec<IpAddr>,
    buf: Vec<u8>,
    /// Next peer and next packet, round robin (counters instead of `%`, so
    /// the loop spends no divisions on picking them).
    next_peer: usize,
    next_packet: usize,
}

impl Workload {
    /// A workload over `peers` peers, warmed up so every queue has reached its
    /// steady-state capacity (no allocation afterwards).
    pub fn new(peers: usize) -> Self {
        let config = EngineConfig {
            max_peers: peers.max(1),
            classifier: Classifier {
                rules: vec![Rule {
                    class: TrafficClass::Bundle,
                    protocol: Some(17),
                    ports: Some(16384..=32767),
                    ..Rule::default()
                }],
                default: TrafficClass::Bypass,
            },
            ..EngineConfig::default()
        };
        let mut w = Workload {
            engine: Engine::new(config),
            packets: (0..16).map(packet).collect(),
            peers: (0..peers as u32)
                .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i)))
                .collect(),
            buf: vec![0u8; 65_535],
            next_peer: 0,
            next_packet: 0,
        };
        w.run(peers * 64);
        w
    }

    /// Pushes `n` packets through classify + bundle + split. Returns the
    /// number of inner packets the receiver split out (so nothing is optimised away).
    #[inline(never)]
    pub fn run(&mut self, n: usize) -> u64 {
        let mut received = 0u64;
        for _ in 0..n {
            let peer = self.peers[self.next_peer];
            self.next_peer += 1;
            if self.next_peer == self.peers.len() {
                self.next_peer = 0;
            }
            let pkt = &self.packets[self.next_packet];
            self.next_packet += 1;
            if self.next_packet == self.packets.len() {
                self.next_packet = 0;
            }
            self.engine.handle_packet(0, peer, pkt, 0);
            while let Some(t) = self.engine.poll_transmit(0, &mut self.buf) {
                match t.kind {
                    TransmitKind::Bundle { encoding, .. } => {
                        let b = encoding
                            .decode(&self.buf[..t.len])
                            .expect("own bundles decode");
                        for inner in b.iter() {
                            received += inner.len() as u64 / 60;
                        }
                    }
                    _ => received += 1,
                }
            }
        }
        received
    }
}
