//! Packet builders and invariant checks shared by the engine tests
//! (`engine_unit.rs`, `engine_props.rs`). Test-only; owns no engine logic.
#![allow(dead_code)]

use airpack_core::engine::{Engine, Stats};
use airpack_core::wire::ip::checksum;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const UDP: u8 = 17;
pub const TCP: u8 = 6;

/// An IPv4 packet of exactly `total` bytes (>= 28) with a valid header
/// checksum, carrying a UDP header (or TCP when `protocol == 6`, with `flags`).
/// `tag` is written into the payload so packets can be told apart.
pub fn ipv4(
    protocol: u8,
    sport: u16,
    dport: u16,
    dscp: u8,
    total: usize,
    tag: u32,
    flags: u8,
) -> Vec<u8> {
    let l4 = if protocol == TCP { 20 } else { 8 };
    let total = total.max(20 + l4 + 4);
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[1] = dscp << 2;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&(tag as u16).to_be_bytes());
    p[8] = 64;
    p[9] = protocol;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    if protocol == TCP {
        p[32] = 0x50;
        p[33] = flags;
    } else {
        p[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
    }
    p[20 + l4..20 + l4 + 4].copy_from_slice(&tag.to_be_bytes());
    p
}

/// A UDP/IPv4 voice-like packet (ports 16384 -> 16386) of `total` bytes.
pub fn udp4(total: usize, dscp: u8, tag: u32) -> Vec<u8> {
    ipv4(UDP, 16384, 16386, dscp, total, tag, 0)
}

/// A UDP/IPv6 packet of `total` bytes (>= 52).
pub fn udp6(total: usize, dscp: u8, tag: u32) -> Vec<u8> {
    let total = total.max(40 + 8 + 4);
    let mut p = vec![0u8; total];
    p[0] = 0x60 | (dscp >> 2);
    p[1] = (dscp & 3) << 6;
    p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
    p[6] = UDP;
    p[7] = 64;
    p[8..24].copy_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets());
    p[24..40].copy_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
    p[40..42].copy_from_slice(&16384u16.to_be_bytes());
    p[42..44].copy_from_slice(&16386u16.to_be_bytes());
    p[44..46].copy_from_slice(&((total - 40) as u16).to_be_bytes());
    p[48..52].copy_from_slice(&tag.to_be_bytes());
    p
}

/// An IPv4 fragment (MF set).
pub fn fragment4(total: usize, tag: u32) -> Vec<u8> {
    let mut p = udp4(total, 0, tag);
    p[6] = 0x20;
    p[10] = 0;
    p[11] = 0;
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// Peer number `n` (distinct IPv4 next hops).
pub fn peer(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + n))
}

/// in == aggregated + unaggregated + bypass + dropped + queued, for the totals.
pub fn check_accounting(e: &Engine) {
    let c = &e.stats().counters;
    let (queued, _) = e.queued();
    assert_eq!(
        c.packets_in,
        c.aggregated_packets
            + c.unaggregated_packets
            + c.bypass_packets
            + c.dropped_total()
            + queued as u64,
        "accounting identity broken: {c:?}, queued {queued}"
    );
}

/// Same identity for one peer that has never been removed (its own queue;
/// its bypass packets are assumed drained).
pub fn check_peer_accounting(s: &Stats, queued: usize) {
    let c = &s.counters;
    assert_eq!(
        c.packets_in,
        c.aggregated_packets
            + c.unaggregated_packets
            + c.bypass_packets
            + c.dropped_total()
            + queued as u64,
        "peer accounting identity broken: {c:?}, queued {queued}"
    );
}
