//! Unit tests of the downlink multiplexer ([`super`]).

use super::*;
use crate::downlink::airtime::CellPhy;
use crate::downlink::udp_checksum;
use core::net::Ipv4Addr;

/// A G.729 packet: IPv4 198.51.100.1:5004 -> 192.168.1.5:6600, EF, DF,
/// ID `id`, TTL `ttl`, RTP seq/ts, 20 voice bytes; checksums valid.
fn g729(seq: u16, ts: u32, id: u16, ttl: u8) -> Vec<u8> {
    g729_to(6600, seq, ts, id, ttl)
}

/// A G.729 RTP packet to 192.168.1.5:`port`.
fn g729_to(port: u16, seq: u16, ts: u32, id: u16, ttl: u8) -> Vec<u8> {
    let mut p = vec![
        0x45, 0xb8, 0, 60, 0, 0, 0x40, 0, ttl, 17, 0, 0, 198, 51, 100, 1, 192, 168, 1, 5,
    ];
    p[4..6].copy_from_slice(&id.to_be_bytes());
    let c = ip::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut u = vec![0x13, 0x8c, 0, 0, 0, 40, 0, 0, 0x80, 18];
    u[2..4].copy_from_slice(&port.to_be_bytes());
    u.extend_from_slice(&seq.to_be_bytes());
    u.extend_from_slice(&ts.to_be_bytes());
    u.extend_from_slice(&0xdeadbeefu32.to_be_bytes());
    u.extend_from_slice(&[0x11; 20]);
    let src = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
    let dst = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
    let c = match udp_checksum(&src, &dst, &u) {
        0 => 0xffff,
        c => c,
    };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&u);
    p
}

/// A mux with `cfg` and its station: stream 1 to 192.168.1.5:6600 on
/// both, the medium busy (frames leave on flush or interval only).
fn mux_and_station(cfg: MuxConfig) -> (Mux, crate::downlink::demux::Demux) {
    use crate::downlink::demux::{Demux, DemuxConfig};
    let dst = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
    let mut m = Mux::new(cfg);
    m.add_stream(dst, 6600, 1).unwrap();
    m.set_link_busy(0, true);
    let mut d = Demux::new(DemuxConfig::default());
    d.add_stream(1, dst, 6600);
    (m, d)
}

fn mux() -> Mux {
    let mut m = Mux::new(MuxConfig::default());
    m.add_stream(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)), 6600, 1)
        .unwrap();
    m.set_link_busy(0, true);
    m
}

#[test]
fn steady_stream_compresses_to_four_bytes_per_packet() {
    let mut m = mux();
    let mut buf = vec![0u8; 1440];
    let mut sizes = Vec::new();
    for k in 0..40u16 {
        let now = u64::from(k) * 20_000;
        assert_eq!(
            m.handle_packet(now, &g729(k, 160 * u32::from(k), 0, 64)),
            Verdict::Queued(1)
        );
        m.flush();
        let t = m.poll_transmit(now, &mut buf).unwrap();
        assert_eq!((t.packets, t.seq, t.reason), (1, k, FrameReason::Flush));
        sizes.push(t.len - compact::HEADER_LEN);
    }
    // First packet full (stride unknown), second full (stride learned:
    // a new generation), two redundant fulls, then compressed entries
    // (sid, ctl, len, seq LSB + 20 voice bytes) with a refresh every 16th.
    assert_eq!(&sizes[..6], &[45, 45, 45, 45, 24, 24]);
    assert_eq!(sizes.iter().filter(|s| **s == 45).count(), 4 + 2);
    assert_eq!(m.stats().compressed_entries, 34);
    assert_eq!(m.stats().bytes_in, 40 * 60);
}

#[test]
fn what_the_format_cannot_carry_goes_back_for_unicast() {
    let mut m = mux();
    assert_eq!(
        m.handle_packet(0, &g729(1, 1, 1, 1)),
        Verdict::Unicast(UnicastReason::TtlExpired)
    );
    let mut bad = g729(1, 1, 1, 64);
    bad[40] ^= 1; // RTP byte: UDP checksum no longer verifies
    assert_eq!(
        m.handle_packet(0, &bad),
        Verdict::Unicast(UnicastReason::BadUdp)
    );
    let mut frag = g729(1, 1, 1, 64);
    frag[6] = 0x20; // MF
    frag[10..12].fill(0);
    let c = ip::checksum(&frag[..20]);
    frag[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        m.handle_packet(0, &frag),
        Verdict::Unicast(UnicastReason::Fragment)
    );
    let mut other = g729(1, 1, 1, 64);
    other[22] = 0x1a; // another destination port: not registered
    assert_eq!(m.handle_packet(0, &other), Verdict::Pass);
    assert_eq!(m.handle_packet(0, &[0x45, 0]), Verdict::Pass);
    assert_eq!(m.stats().unicast, [0, 1, 1, 1, 0, 0, 0]);
    assert_eq!(m.stats().passed, 2);
    assert_eq!(m.pending(), 0);
}

fn airtime_mux(mc: f64) -> Mux {
    use crate::downlink::airtime::Rate;
    let mut m = Mux::new(MuxConfig {
        airtime: Some(CellPhy {
            unicast: Rate::of(11.0, false).unwrap(),
            multicast: Rate::of(mc, false).unwrap(),
        }),
        ..MuxConfig::default()
    });
    m.add_stream(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)), 6600, 1)
        .unwrap();
    m.set_link_busy(0, true);
    m
}

/// 802.11b at 11 Mbit/s, multicast at 2: a frame of one G.729 packet
/// (77 bytes with UDP/IP: 1004 µs) costs more than its unicast
/// exchange (835 µs), so the packet leaves unchanged; a frame of ten
/// (about 2.1 ms against 8.4 ms) is sent. At 11 Mbit/s one packet's
/// frame (about 634 µs) is sent.
#[test]
fn airtime_rule_falls_back_to_unicast_when_the_frame_costs_more() {
    let mut m = airtime_mux(2.0);
    let mut buf = vec![0u8; 1440];
    let p = g729(0, 0, 0, 64);
    assert_eq!(m.handle_packet(0, &p), Verdict::Queued(1));
    m.flush();
    let t = m.poll_transmit(0, &mut buf).unwrap();
    assert!(t.unicast && t.packets == 1, "{t:?}");
    assert_eq!(&buf[..t.len], &p[..], "the original packet, unchanged");
    assert!(m.poll_transmit(0, &mut buf).is_none());
    assert_eq!((m.stats().fallback, m.stats().fallback_frames), (1, 1));
    assert_eq!(m.stats().frames_sent(), 0);
    // Ten packets in one interval: one frame, sequence number 0 (the
    // unsent frame's number is reused), first entry full again.
    for k in 1..=10u16 {
        m.handle_packet(1_000, &g729(k, 160 * u32::from(k), 0, 64));
    }
    let t = m.poll_transmit(21_000, &mut buf).unwrap();
    assert!(!t.unicast, "{t:?}");
    assert_eq!((t.packets, t.seq), (10, 0));
    let f = compact::decode(&buf[..t.len]).unwrap();
    assert!(f.iter().next().unwrap().full.is_some());
    let s = m.stats();
    assert_eq!(
        s.queued,
        s.sent_packets + s.fallback + s.dropped + m.pending() as u64
    );
    assert!(s.airtime_frames_us * 3 < s.airtime_unicast_us, "{s:?}");

    let mut m = airtime_mux(11.0);
    m.handle_packet(0, &g729(0, 0, 0, 64));
    m.flush();
    let t = m.poll_transmit(0, &mut buf).unwrap();
    assert!(!t.unicast);
    assert_eq!(m.stats().fallback, 0);
}

/// Copies under the airtime rule (802.11b 11, multicast 2, 2 copies): a
/// frame goes out as many times as still cost less than its packets as
/// unicast. Two G.729 packets (a frame of about 1.2 ms against 2 x 835
/// µs) leave once; ten (about 2.1 ms against 8.4 ms) leave twice.
#[test]
fn airtime_rule_prices_out_copies_that_cost_more_than_unicast() {
    let mut m = airtime_mux(2.0);
    m.cfg.copies = 2;
    let mut buf = vec![0u8; 1440];
    let mut sends = |m: &mut Mux, n: u16, at: Micros| {
        for k in 0..n {
            m.handle_packet(at, &g729(k, 160 * u32::from(k), 0, 64));
        }
        m.flush();
        let mut v = Vec::new();
        while let Some(t) = m.poll_transmit(at, &mut buf) {
            v.push((t.unicast, t.copy, t.packets));
        }
        v
    };
    assert_eq!(sends(&mut m, 2, 0), [(false, false, 2)], "once");
    assert_eq!((m.stats().copies, m.stats().copies_priced_out), (0, 1));
    assert_eq!(
        sends(&mut m, 10, 40_000),
        [(false, false, 10), (false, true, 0)],
        "twice"
    );
    assert_eq!((m.stats().copies, m.stats().copies_priced_out), (1, 1));
    assert_eq!((m.stats().fallback, m.stats().frames_sent()), (0, 2));
}

/// A frame turned unicast drains packet by packet, in order.
#[test]
fn fallback_frames_drain_one_packet_at_a_time() {
    let mut m = airtime_mux(1.0);
    let mut buf = vec![0u8; 1440];
    // Two G.729 packets at 1 Mbit/s: a 122-byte frame, 1816 µs
    // against 2 x 835 µs.
    for k in 0..2u16 {
        m.handle_packet(0, &g729(k, 160 * u32::from(k), 0, 64));
    }
    m.flush();
    assert_eq!(m.pending(), 2);
    let mut out = Vec::new();
    while let Some(t) = m.poll_transmit(0, &mut buf) {
        assert!(t.unicast);
        out.push(buf[..t.len].to_vec());
        assert_eq!(m.pending(), 2 - out.len());
    }
    assert_eq!(out, [g729(0, 0, 0, 64), g729(1, 160, 0, 64)]);
    assert_eq!(m.stats().fallback, 2);
}

/// Redundancy: frame 1 lost, frame 2 carries its entries: the station
/// rebuilds all packets in order; with nothing lost the repeats are
/// skipped as duplicates.
#[test]
fn redundancy_recovers_a_lost_frame() {
    use crate::downlink::demux::MAX_REBUILT;
    let run = |lose: Option<usize>| {
        let (mut m, mut d) = mux_and_station(MuxConfig {
            redundancy: 1,
            ..MuxConfig::default()
        });
        let (mut buf, mut scratch) = (vec![0u8; 1440], vec![0u8; MAX_REBUILT]);
        let mut got = Vec::new();
        for k in 0..6u16 {
            m.handle_packet(0, &g729(k, 160 * u32::from(k), 0, 64));
            if k % 2 == 1 {
                m.flush();
                let t = m.poll_transmit(0, &mut buf).unwrap();
                assert_eq!(t.packets, 2);
                if Some(usize::from(k / 2)) != lose {
                    d.handle_frame(&buf[..t.len], &mut scratch, |p| got.push(p.to_vec()))
                        .unwrap();
                }
            }
        }
        assert_eq!(m.stats().repeated, 4);
        (got, d.stats().clone())
    };
    let want: Vec<Vec<u8>> = (0..6u16)
        .map(|k| g729(k, 160 * u32::from(k), 0, 63))
        .collect();
    let (got, st) = run(None);
    assert_eq!(got, want);
    assert_eq!((st.duplicates, st.recovered), (4, 0));
    let (got, st) = run(Some(1));
    assert_eq!(got, want, "frame 1's packets come from frame 2's repeat");
    assert_eq!((st.recovered, st.lost_frames), (2, 1));
}

/// Redundancy depth: two frames lost in a row come back from the
/// next frame's two blocks at depth 2, only the second at depth 1; the
/// blocks are the previous frames' entries, oldest first, and a block
/// that does not fit is left out (the newest kept).
#[test]
fn redundancy_depth_recovers_a_run_of_lost_frames() {
    use crate::downlink::demux::MAX_REBUILT;
    let run = |depth: u8, max_frame: usize, lose: &[u16]| {
        let (mut m, mut d) = mux_and_station(MuxConfig {
            redundancy: depth,
            max_frame,
            ..MuxConfig::default()
        });
        let (mut buf, mut scratch) = (vec![0u8; 1440], vec![0u8; MAX_REBUILT]);
        let (mut got, mut depths) = (Vec::new(), Vec::new());
        for k in 0..8u16 {
            m.handle_packet(0, &g729(k, 160 * u32::from(k), 0, 64));
            m.flush();
            let t = m.poll_transmit(0, &mut buf).unwrap();
            let f = compact::decode(&buf[..t.len]).unwrap();
            assert_eq!(f.header.seq, k);
            depths.push(f.depth());
            if !lose.contains(&k) {
                d.handle_frame(&buf[..t.len], &mut scratch, |p| got.push(p.to_vec()))
                    .unwrap();
            }
        }
        (got, depths, d.stats().clone())
    };
    let want: Vec<Vec<u8>> = (0..8u16)
        .map(|k| g729(k, 160 * u32::from(k), 0, 63))
        .collect();
    // depth 2: frames 2 and 3 lost, frame 4 carries both
    let (got, depths, st) = run(2, 1440, &[2, 3]);
    assert_eq!(got, want);
    assert_eq!(depths, [0, 1, 2, 2, 2, 2, 2, 2]);
    assert_eq!((st.recovered, st.lost_frames), (2, 2));
    // depth 1: only frame 3's packet comes back
    let (got, depths, st) = run(1, 1440, &[2, 3]);
    assert_eq!(depths, [0, 1, 1, 1, 1, 1, 1, 1]);
    assert_eq!(st.recovered, 1);
    let mut w = want.clone();
    w.remove(2);
    assert_eq!(got, w);
    // depth 3, nothing lost: every repeat is a duplicate, never delivered twice
    let (got, depths, st) = run(3, 1440, &[]);
    assert_eq!(got, want);
    assert_eq!(depths, [0, 1, 2, 3, 3, 3, 3, 3]);
    assert_eq!((st.recovered, st.duplicates), (0, 1 + 2 + 3 * 5));
    // a frame that cannot hold the older blocks keeps the newest that fit
    let mut m = Mux::new(MuxConfig {
        redundancy: 4,
        max_frame: MIN_FRAME,
        ..MuxConfig::default()
    });
    m.add_stream(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)), 6600, 1)
        .unwrap();
    m.set_link_busy(0, true);
    let mut buf = vec![0u8; 1440];
    let mut last = 0;
    for k in 0..6u16 {
        m.handle_packet(0, &g729(k, 160 * u32::from(k), 0, 64));
        m.flush();
        let t = m.poll_transmit(0, &mut buf).unwrap();
        assert!(t.len <= MIN_FRAME);
        let f = compact::decode(&buf[..t.len]).unwrap();
        assert!(f.depth() <= 4);
        last = f.depth();
    }
    assert!(
        (1..4).contains(&last),
        "room for some blocks, not all: {last}"
    );
}

/// Partial repeat: frames too full for the previous frame's whole
/// block carry a window of its entries that rotates over the streams;
/// a station that lost every other frame recovers part of them, in
/// order, never twice. Without the option such frames carry no block
/// (only frames with room for a whole block do).
#[test]
fn partial_repeat_rotates_over_the_streams() {
    use crate::downlink::demux::{Demux, DemuxConfig, MAX_REBUILT};
    let dst = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
    let run = |partial: bool| {
        let mut m = Mux::new(MuxConfig {
            redundancy: 1,
            partial_repeat: partial,
            max_frame: 256,
            ..MuxConfig::default()
        });
        let mut d = Demux::new(DemuxConfig::default());
        for sid in 0..6u16 {
            m.add_stream(dst, 6600 + sid, sid).unwrap();
            d.add_stream(sid, dst, 6600 + sid);
        }
        m.set_link_busy(0, true);
        let (mut buf, mut scratch) = (vec![0u8; 1440], vec![0u8; MAX_REBUILT]);
        let (mut got, mut want, mut repeated_sids) = (Vec::new(), Vec::new(), Vec::new());
        let mut frame_no = 0;
        for k in 0..12u16 {
            for sid in 0..6u16 {
                let ts = 160 * u32::from(k);
                m.handle_packet(0, &g729_to(6600 + sid, k, ts, 0, 64));
                want.push(g729_to(6600 + sid, k, ts, 0, 63));
            }
            m.flush();
            while let Some(t) = m.poll_transmit(0, &mut buf) {
                let f = compact::decode(&buf[..t.len]).unwrap();
                assert!(t.len <= 256 && f.depth() <= 1);
                repeated_sids.extend(f.repeated().map(|e| e.sid));
                if frame_no % 2 == 0 {
                    d.handle_frame(&buf[..t.len], &mut scratch, |p| got.push(p.to_vec()))
                        .unwrap();
                }
                frame_no += 1;
            }
        }
        let mut it = want.iter();
        for g in &got {
            assert!(it.any(|w| w == g), "duplicated, altered or out of order");
        }
        (m.stats().clone(), d.stats().clone(), repeated_sids)
    };
    let (ms, ds, sids) = run(true);
    assert!(ms.partial_repeats > 0 && ds.recovered > 0, "{ms:?} {ds:?}");
    for sid in 0..6u16 {
        assert!(sids.contains(&sid), "stream {sid} never repeated: {sids:?}");
    }
    let (ms_off, ds_off, _) = run(false);
    assert_eq!(ms_off.partial_repeats, 0);
    assert!(
        ds_off.recovered < ds.recovered,
        "{} whole blocks only vs {} with windows",
        ds_off.recovered,
        ds.recovered
    );
}

#[test]
fn frame_leaves_on_interval_size_and_idle() {
    let mut m = mux();
    let mut buf = vec![0u8; 1440];
    m.handle_packet(1_000, &g729(1, 160, 0, 64));
    assert_eq!(m.poll_timeout(), Some(21_000));
    assert!(m.poll_transmit(20_999, &mut buf).is_none());
    let t = m.poll_transmit(21_000, &mut buf).unwrap();
    assert_eq!((t.packets, t.reason), (1, FrameReason::Interval));
    // 60 G.729 packets of ~24-45 bytes do not fit 1440: a Size frame.
    for k in 0..60 {
        m.handle_packet(30_000, &g729(k, 160 * u32::from(k), 0, 64));
    }
    let t = m.poll_transmit(30_000, &mut buf).unwrap();
    assert_eq!(t.reason, FrameReason::Size);
    assert!(t.len <= 1440 && t.len + 24 > 1440, "{}", t.len);
    assert!(m.poll_transmit(30_000, &mut buf).is_none());
    let left = m.pending();
    assert_eq!(t.packets + left, 60);
    m.flush();
    m.poll_transmit(30_000, &mut buf).unwrap();
    // Idle medium and a single pending packet: at once.
    m.set_link_busy(40_000, false);
    m.handle_packet(40_000, &g729(61, 161 * 160, 0, 64));
    let t = m.poll_transmit(40_000, &mut buf).unwrap();
    assert_eq!((t.packets, t.reason), (1, FrameReason::Idle));
    assert_eq!(m.stats().frames, [1, 1, 1, 1]);
}

/// Copies: each frame leaves `copies` times with the same bytes and
/// sequence number, its packets counted once; a station that misses any
/// copy but one rebuilds every packet once (the other copies are stale);
/// a full queue takes a frame's further copies before any unsent frame.
#[test]
fn copies_send_each_frame_again_and_count_its_packets_once() {
    use crate::downlink::demux::MAX_REBUILT;
    let (mut m, mut d) = mux_and_station(MuxConfig {
        copies: 3,
        ..MuxConfig::default()
    });
    let (mut buf, mut scratch) = (vec![0u8; 1440], vec![0u8; MAX_REBUILT]);
    let mut got = Vec::new();
    for k in 0..4u16 {
        m.handle_packet(0, &g729(k, 160 * u32::from(k), 0, 64));
        m.flush();
        let mut bytes = Vec::new();
        for c in 0..3 {
            let t = m.poll_transmit(0, &mut buf).unwrap();
            assert_eq!((t.seq, t.copy), (k, c > 0), "frame {k} copy {c}");
            assert_eq!((t.packets, t.unicast), (usize::from(c == 0), false));
            bytes.push(buf[..t.len].to_vec());
            // frame k reaches the station only as its copy k % 3
            if c == usize::from(k % 3) {
                d.handle_frame(&buf[..t.len], &mut scratch, |p| got.push(p.to_vec()))
                    .unwrap();
            }
        }
        assert!(bytes.iter().all(|b| *b == bytes[0]));
        assert!(m.poll_transmit(0, &mut buf).is_none());
    }
    let want: Vec<Vec<u8>> = (0..4u16)
        .map(|k| g729(k, 160 * u32::from(k), 0, 63))
        .collect();
    assert_eq!(got, want);
    assert_eq!(d.stats().lost_frames, 0);
    let st = m.stats();
    assert_eq!((st.sent_packets, st.frames_sent(), st.copies), (4, 4, 8));

    // Queue of 2: frame 4 has left once when frames 5 and 6 close; its
    // last two copies give way, nothing is dropped.
    let (mut m, _) = mux_and_station(MuxConfig {
        copies: 3,
        queue_frames: 2,
        ..MuxConfig::default()
    });
    m.handle_packet(0, &g729(4, 640, 0, 64));
    m.flush();
    assert!(!m.poll_transmit(0, &mut buf).unwrap().copy);
    for k in 5..7u16 {
        m.handle_packet(0, &g729(k, 160 * u32::from(k), 0, 64));
        m.flush();
    }
    let t = m.poll_transmit(0, &mut buf).unwrap();
    assert_eq!((t.seq, t.copy, t.packets), (1, false, 1), "frame 5 next");
    assert_eq!((m.stats().dropped, m.stats().copies), (0, 0));
}
