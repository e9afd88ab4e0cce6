//! TCP control packets are never delayed (issue 11 point 9; seed 004's
//! "non-concatenate" TCP packets): in every link mode (fixed hold,
//! hold-while-busy, adaptive), whatever class the rules give TCP (bundle or
//! opportunistic), over IPv4 and IPv6, a SYN, SYN-ACK, FIN, RST or RST-ACK
//! handed in while the peer's queue is held on a busy link leaves at the
//! same instant, unchanged and alone (a bypass transmit), without releasing
//! or joining the held queue; a plain ACK or a small data segment of the
//! same flow is queued by the rules (so the check can fail).
//!
//! `engine_props.rs` checks the same with random operations (TCP with the
//! flags 0x02, 0x12, 0x11, 0x04 among them, all three link modes: "bypass
//! packets never wait after a drain"); `engine_unit.rs`
//! (`bypass_class_is_untouched_and_immediate`) on an idle engine. This file
//! pins the case that matters for TCP beside voice: a queue already held.

mod engine_common;

use airpack_core::engine::{
    AdaptiveHold, Classifier, Engine, EngineConfig, LinkMode, PeerConfig, Rule, TrafficClass,
    TransmitKind, Verdict,
};
use airpack_core::wire::ip::tcp_flags::{FIN, RST, SYN};
use core::net::Ipv6Addr;
use engine_common::*;

const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const HOLD: u64 = 20_000;

/// A TCP/IPv6 packet of `total` bytes (>= 64) with `flags`, ports 1000 -> 80.
fn tcp6(total: usize, flags: u8, tag: u32) -> Vec<u8> {
    let total = total.max(40 + 20 + 4);
    let mut p = vec![0u8; total];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
    p[6] = TCP;
    p[7] = 64;
    p[8..24].copy_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets());
    p[24..40].copy_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
    p[40..42].copy_from_slice(&1000u16.to_be_bytes());
    p[42..44].copy_from_slice(&80u16.to_be_bytes());
    p[52] = 0x50;
    p[53] = flags;
    p[60..64].copy_from_slice(&tag.to_be_bytes());
    p
}

fn tcp(v6: bool, total: usize, flags: u8, tag: u32) -> Vec<u8> {
    if v6 {
        tcp6(total, flags, tag)
    } else {
        ipv4(TCP, 1000, 80, 0, total, tag, flags)
    }
}

/// Voice of flow `flow` (UDP, bundle class), IPv4 or IPv6.
fn voice(v6: bool, flow: u16, tag: u32) -> Vec<u8> {
    let port = (16384 + 2 * flow).to_be_bytes();
    if v6 {
        let mut p = udp6(80, 46, tag);
        p[40..42].copy_from_slice(&port);
        p
    } else {
        // IPv4 header checksum does not cover the ports
        let mut p = udp4(60, 46, tag);
        p[20..22].copy_from_slice(&port);
        p
    }
}

fn engine(mode: LinkMode, tcp_class: TrafficClass) -> Engine {
    Engine::new(EngineConfig {
        peer_defaults: PeerConfig {
            hold_time: HOLD,
            ..PeerConfig::default()
        },
        link_mode: mode,
        classifier: Classifier {
            rules: vec![
                Rule {
                    class: TrafficClass::Bundle,
                    protocol: Some(UDP),
                    ports: Some(16384..=32767),
                    ..Rule::default()
                },
                // seed 004: TCP ACKs and small segments may be concatenated
                Rule {
                    class: tcp_class,
                    protocol: Some(TCP),
                    len: Some(0..=750),
                    ..Rule::default()
                },
            ],
            default: TrafficClass::Bypass,
        },
        ..EngineConfig::default()
    })
}

/// Tells the engine its link is busy in the way `mode` listens.
fn make_busy(e: &mut Engine, mode: LinkMode, now: u64) {
    match mode {
        LinkMode::Adaptive(_) => e.set_medium(now, 1000, true),
        _ => e.set_link_busy(now, true),
    }
}

/// The voice flows have been running: three flows sent a packet each one
/// hold time before `T0` and everything has left since (adaptive mode holds
/// only a packet that has company, another flow seen within one to two hold
/// times).
fn warm_up(e: &mut Engine, p: core::net::IpAddr, v6: bool) {
    for f in 0..3u16 {
        e.handle_packet(u64::from(f) * 100, p, &voice(v6, f, 1000 + u32::from(f)), 0);
    }
    // The TCP flow runs already: in adaptive mode a flow's first packet after
    // a silence (a talk spurt's start, when in the bundle class) waits its
    // full limit instead of leaving with the queue in front of it.
    e.handle_packet(300, p, &tcp(v6, 60, ACK, 1003), 0);
    drain(e, 300);
    drain(e, T0 - 1);
    assert_eq!(e.peer_queued(p).unwrap().0, 0, "warm-up left");
}

/// Start of the checks, after [`warm_up`].
const T0: u64 = HOLD + 2_000;

fn drain(e: &mut Engine, now: u64) -> Vec<(TransmitKind, Vec<u8>)> {
    let mut buf = vec![0u8; 65_535];
    let mut out = Vec::new();
    while let Some(t) = e.poll_transmit(now, &mut buf) {
        out.push((t.kind, buf[..t.len].to_vec()));
    }
    out
}

const MODES: [LinkMode; 3] = [
    LinkMode::Fixed,
    LinkMode::HoldWhileBusy,
    LinkMode::Adaptive(AdaptiveHold {
        delay_budget: 40_000,
        busy_utilisation: 100,
    }),
];

const CONTROL: [(&str, u8); 7] = [
    ("SYN", SYN),
    ("SYN-ACK", SYN | ACK),
    ("FIN", FIN),
    ("FIN-ACK", FIN | ACK),
    ("FIN-PSH-ACK", FIN | PSH | ACK),
    ("RST", RST),
    ("RST-ACK", RST | ACK),
];

#[test]
fn control_packets_leave_at_once_past_a_held_queue() {
    let p = peer(1);
    let mut cases = 0;
    for mode in MODES {
        for class in [TrafficClass::Bundle, TrafficClass::Opportunistic] {
            for v6 in [false, true] {
                for (name, flags) in CONTROL {
                    let what = format!("{name} {mode:?} tcp={class:?} v6={v6}");
                    let mut e = engine(mode, class);
                    make_busy(&mut e, mode, 0);
                    warm_up(&mut e, p, v6);
                    let bypassed = e.stats().counters.bypass_packets;
                    // A held queue: three voice flows and an ACK and a small
                    // data segment of the TCP flow, all within 1 ms.
                    let mut tag = 0;
                    for f in 0..3 {
                        tag += 1;
                        assert_eq!(
                            e.handle_packet(T0 + f * 100, p, &voice(v6, f as u16, tag), 0),
                            Verdict::Queued(TrafficClass::Bundle),
                            "{what}"
                        );
                    }
                    for (f, len) in [(ACK, 60), (PSH | ACK, 200)] {
                        tag += 1;
                        assert_eq!(
                            e.handle_packet(T0 + 400, p, &tcp(v6, len, f, tag), 0),
                            Verdict::Queued(class),
                            "{what}: flags {f:#x} follow the rules"
                        );
                    }
                    assert!(drain(&mut e, T0 + 400).is_empty(), "{what}: all held");
                    let held = e.peer_queued(p).unwrap().0;
                    assert_eq!(held, 5, "{what}: the queue is held on the busy link");
                    let due = e.poll_timeout().unwrap();
                    assert!(due > T0 + 1_000, "{what}: nothing due before {due}");
                    // The control packet, 1 ms later, well inside the hold.
                    let ctl = tcp(v6, 64, flags, 99);
                    assert_eq!(
                        e.handle_packet(T0 + 1_000, p, &ctl, 0),
                        Verdict::Queued(TrafficClass::Bypass),
                        "{what}"
                    );
                    assert_eq!(
                        e.poll_timeout(),
                        Some(T0 + 1_000),
                        "{what}: due the instant it arrived"
                    );
                    let out = drain(&mut e, T0 + 1_000);
                    assert_eq!(out.len(), 1, "{what}: one transmit, {out:?}");
                    assert_eq!(out[0].0, TransmitKind::Bypass, "{what}: alone, unbundled");
                    assert_eq!(out[0].1, ctl, "{what}: unchanged");
                    assert_eq!(
                        e.peer_queued(p).unwrap().0,
                        held,
                        "{what}: the held queue neither released nor joined"
                    );
                    assert_eq!(e.stats().counters.bypass_packets, bypassed + 1, "{what}");
                    // The held packets still leave together, by the hold.
                    let rest = drain(&mut e, T0 + HOLD);
                    assert!(
                        rest.iter()
                            .all(|(k, _)| matches!(k, TransmitKind::Bundle { .. })),
                        "{what}: {rest:?}"
                    );
                    assert_eq!(e.peer_queued(p).unwrap().0, 0, "{what}");
                    check_accounting(&e);
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 3 * 2 * 2 * CONTROL.len());
}

#[test]
fn a_burst_of_control_packets_keeps_its_order_and_never_waits() {
    // Control packets interleaved with ACKs on a busy link: every control
    // packet leaves at its own arrival, in order; the ACKs are held.
    for mode in MODES {
        let p = peer(2);
        let mut e = engine(mode, TrafficClass::Opportunistic);
        make_busy(&mut e, mode, 0);
        warm_up(&mut e, p, false);
        for f in 0..3 {
            e.handle_packet(T0, p, &voice(false, f, f as u32), 0);
        }
        assert!(drain(&mut e, T0).is_empty(), "{mode:?}");
        let mut t = T0 + 100;
        for (k, (_, flags)) in CONTROL.iter().enumerate() {
            let ack = tcp(false, 60, ACK, 100 + k as u32);
            assert_eq!(
                e.handle_packet(t, p, &ack, 0),
                Verdict::Queued(TrafficClass::Opportunistic)
            );
            let ctl = tcp(false, 60, *flags, 200 + k as u32);
            e.handle_packet(t, p, &ctl, 0);
            let out = drain(&mut e, t);
            assert_eq!(
                out,
                vec![(TransmitKind::Bypass, ctl)],
                "{mode:?}: control packet {k} alone at once"
            );
            t += 500;
        }
        assert_eq!(e.peer_queued(p).unwrap().0, 3 + CONTROL.len(), "{mode:?}");
    }
}
