//! The benchmark workload shared by `benches/engine.rs` (criterion, wall
//! clock) and `examples/bench_count.rs` (callgrind instruction counts):
//! 60-byte UDP/IPv4 packets spread round robin over N peers, each one
//! classified, queued, bundled (native encoding, default 1400/1500-byte
//! min/max, so about 22 packets per bundle) and split again by the receiver's
//! decoder. Bench-only; owns no engine logic.

use airpack_core::engine::{Classifier, Engine, EngineConfig, Rule, TrafficClass, TransmitKind};
use airpack_core::wire::ip::checksum;
use core::hint::black_box;
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

/// Length of the workload's packets.
pub const PACKET_LEN: usize = 60;

/// Engine + packets + peers for one benchmark configuration.
pub struct Workload {
    pub engine: Engine,
    /// The input, in order: packet `i` (of 16 distinct ones, round robin)
    /// goes to peer `i` (round robin), for as many packets as it takes both
    /// round robins to start over together (so the sequence repeats exactly).
    /// Only input, prepared once: every packet is still handed to the engine,
    /// bundled, decoded and iterated each time.
    schedule: Vec<(IpAddr, [u8; PACKET_LEN])>,
    buf: Vec<u8>,
    /// Next schedule entry.
    next: usize,
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
        let packets: Vec<Vec<u8>> = (0..16).map(packet).collect();
        let peer_keys: Vec<IpAddr> = (0..peers.max(1) as u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i)))
            .collect();
        let (p, k) = (peer_keys.len(), packets.len());
        let gcd = |mut a: usize, mut b: usize| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let schedule = (0..p / gcd(p, k) * k)
            .map(|i| {
                let pkt: [u8; PACKET_LEN] = packets[i % k][..].try_into().expect("60 bytes");
                (peer_keys[i % p], pkt)
            })
            .collect();
        let mut w = Workload {
            engine: Engine::new(config),
            schedule,
            buf: vec![0u8; 65_535],
            next: 0,
        };
        w.run(peers * 64);
        w
    }

    /// Pushes `n` packets through classify + bundle + split. Returns the
    /// number of inner packets the receiver split out (so nothing is optimised away).
    #[inline(never)]
    pub fn run(&mut self, n: usize) -> u64 {
        let Workload {
            engine,
            schedule,
            buf,
            next,
        } = self;
        // Time stands still and no packet is marked, but the compiler must not
        // know that (nor the packets' length), or it could specialise the
        // engine for this benchmark's constants; opaque values, set once.
        let (now, mark, len) = (black_box(0), black_box(0), black_box(PACKET_LEN));
        let mut received = 0u64;
        let mut left = n;
        while left > 0 {
            // The rest of the schedule, or as much of it as is left to do.
            let part = &schedule[*next..][..left.min(schedule.len() - *next)];
            for (peer, pkt) in part {
                engine.handle_packet(now, *peer, &pkt[..len], mark);
                while let Some(t) = engine.poll_transmit(now, buf) {
                    match t.kind {
                        TransmitKind::Bundle { encoding, .. } => {
                            let b = encoding.decode(&buf[..t.len]).expect("own bundles decode");
                            for _inner in b.iter() {
                                received += 1;
                            }
                        }
                        _ => received += 1,
                    }
                }
            }
            left -= part.len();
            *next += part.len();
            if *next == schedule.len() {
                *next = 0;
            }
        }
        received
    }
}
