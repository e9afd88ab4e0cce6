//! Tests of the loss rule (`super`): sans-IO, simulated time.

use super::*;
use crate::downlink::mux::{MuxConfig, UnicastReason, Verdict};
use core::net::Ipv4Addr;

const SEC: Micros = 1_000_000;

fn sta(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

/// An 802.11b cell at 11 Mbit/s (unicast and multicast) and a mux with
/// its airtime rule on, without streams.
fn b11_airtime_mux() -> (crate::downlink::airtime::CellPhy, Mux) {
    use crate::downlink::airtime::{CellPhy, Rate};
    let phy = CellPhy {
        unicast: Rate::of(11.0, false).unwrap(),
        multicast: Rate::of(11.0, false).unwrap(),
    };
    let mux = Mux::new(MuxConfig {
        airtime: Some(phy),
        idle_release: false,
        ..MuxConfig::default()
    });
    (phy, mux)
}

fn rep(received: u32, missed: u32) -> LossReport {
    LossReport {
        received,
        missed,
        unrecovered: missed,
    }
}

#[test]
fn lossy_station_goes_to_unicast_and_returns_when_clean() {
    let mut mux = Mux::new(MuxConfig::default());
    mux.add_stream(sta(1), 4000, 0).unwrap();
    let mut lc = LossControl::new(LossConfig::default());
    lc.report(SEC, sta(1), &rep(45, 5), 50, &mut mux);
    assert!(mux.is_unicast(sta(1)));
    assert_eq!(lc.stats().to_unicast, 1);
    // 0.6 % smoothed after one clean report: still above `clear`.
    lc.report(2 * SEC, sta(1), &rep(50, 0), 100, &mut mux);
    lc.report(3 * SEC, sta(1), &rep(50, 0), 150, &mut mux);
    assert!(
        mux.is_unicast(sta(1)),
        "hysteresis: 5/150 -> 2.5/175 -> 1.25/187"
    );
    for k in 4..8 {
        lc.report(k * SEC, sta(1), &rep(50, 0), 50 * k, &mut mux);
    }
    assert!(!mux.is_unicast(sta(1)));
    assert_eq!(lc.stats().to_multicast, 1);
}

#[test]
fn blackout_is_charged_and_first_report_sets_the_mark() {
    let mut mux = Mux::new(MuxConfig::default());
    let mut lc = LossControl::new(LossConfig::default());
    lc.report(SEC, sta(2), &rep(0, 0), 1000, &mut mux);
    assert!(!mux.is_unicast(sta(2)), "no mark yet: no evidence");
    lc.report(2 * SEC, sta(2), &rep(0, 0), 1010, &mut mux);
    assert!(!mux.is_unicast(sta(2)), "10 frames < min_frames");
    lc.report(3 * SEC, sta(2), &rep(0, 0), 1060, &mut mux);
    assert!(mux.is_unicast(sta(2)));
    assert_eq!(lc.stats().blackouts, 1);
}

#[test]
fn recovered_frames_do_not_count_and_disabled_never_moves() {
    let mut mux = Mux::new(MuxConfig::default());
    let mut lc = LossControl::new(LossConfig::default());
    let r = LossReport {
        received: 45,
        missed: 5,
        unrecovered: 0,
    };
    lc.report(SEC, sta(3), &r, 50, &mut mux);
    assert!(!mux.is_unicast(sta(3)));
    let mut off = LossControl::new(LossConfig {
        enabled: false,
        ..LossConfig::default()
    });
    off.report(SEC, sta(3), &rep(0, 50), 50, &mut mux);
    assert!(!mux.is_unicast(sta(3)));
    assert_eq!(off.stats().reports, 1);
}

#[test]
fn probe_returns_for_a_trial_and_backs_off() {
    let mut mux = Mux::new(MuxConfig::default());
    let mut lc = LossControl::new(LossConfig::default());
    lc.report(0, sta(4), &rep(40, 10), 50, &mut mux);
    assert_eq!(lc.poll_timeout(), Some(30 * SEC));
    lc.handle_timeout(30 * SEC - 1, &mut mux);
    assert!(mux.is_unicast(sta(4)));
    lc.handle_timeout(30 * SEC, &mut mux);
    assert!(!mux.is_unicast(sta(4)));
    assert_eq!(lc.stats().probes, 1);
    lc.report(31 * SEC, sta(4), &rep(40, 10), 100, &mut mux);
    assert!(mux.is_unicast(sta(4)));
    assert_eq!(lc.poll_timeout(), Some(91 * SEC), "second wait 60 s");
}

#[test]
fn table_is_bounded_and_forget_releases() {
    let mut mux = Mux::new(MuxConfig::default());
    let mut lc = LossControl::new(LossConfig {
        max_stations: 2,
        ..LossConfig::default()
    });
    for n in 1..=3 {
        lc.report(SEC, sta(n), &rep(0, 50), 50, &mut mux);
    }
    assert_eq!(lc.stations().count(), 2);
    assert_eq!(lc.stats().rejected, 1);
    assert_eq!(lc.on_unicast(), 2);
    lc.forget(sta(1), &mut mux);
    assert!(!mux.is_unicast(sta(1)));
    lc.retain(|_| false, &mut mux);
    assert_eq!(lc.stations().count(), 0);
    assert!(!mux.is_unicast(sta(2)));
}

#[test]
fn mux_hands_back_a_lossy_stations_packets_and_restarts_its_context() {
    use crate::downlink::demux::{Demux, DemuxConfig};
    let mut mux = Mux::new(MuxConfig {
        idle_release: false,
        ..MuxConfig::default()
    });
    mux.add_stream(sta(5), 4000, 0).unwrap();
    let pkt = |seq: u16| voip_to(sta(5), 4000, seq);
    assert_eq!(mux.handle_packet(0, &pkt(1)), Verdict::Queued(0));
    mux.set_unicast(sta(5), true);
    assert_eq!(
        mux.handle_packet(1, &pkt(2)),
        Verdict::Unicast(UnicastReason::Loss)
    );
    // Registered later (new lease): follows the setting.
    mux.add_stream(sta(5), 4002, 1).unwrap();
    assert_eq!(
        mux.handle_packet(2, &voip_to(sta(5), 4002, 1)),
        Verdict::Unicast(UnicastReason::Loss)
    );
    mux.set_unicast(sta(5), false);
    assert_eq!(mux.handle_packet(3, &pkt(3)), Verdict::Queued(0));
    mux.flush();
    let mut d = Demux::new(DemuxConfig::default());
    d.add_stream(0, sta(5), 4000);
    let mut buf = vec![0u8; 2048];
    let mut scratch = vec![0u8; 2048];
    let mut got = 0;
    while let Some(t) = mux.poll_transmit(4, &mut buf) {
        got += d.handle_frame(&buf[..t.len], &mut scratch, |_| {}).unwrap();
    }
    assert_eq!(got, 2, "packets 1 and 3 rebuilt (3 from a full entry)");
    assert_eq!(d.stats().no_context, 0);
    let s = mux.stats();
    assert_eq!(s.unicast[UnicastReason::Loss as usize], 2);
    assert_eq!(
        s.handled,
        s.passed + s.unicast.iter().sum::<u64>() + s.queued
    );
}

#[test]
fn new_station_starts_on_unicast_until_a_clean_report() {
    let mut mux = Mux::new(MuxConfig::default());
    let on = LossConfig {
        start_unicast: true,
        ..LossConfig::default()
    };
    let mut lc = LossControl::new(on);
    lc.admit(0, sta(6), &mut mux);
    assert!(!mux.is_unicast(sta(6)), "decided at its first check");
    assert_eq!(lc.poll_timeout(), Some(200_000));
    lc.handle_timeout(199_999, &mut mux);
    assert!(!mux.is_unicast(sta(6)));
    lc.handle_timeout(200_000, &mut mux);
    assert!(mux.is_unicast(sta(6)));
    assert_eq!(lc.stats().start_unicast, 1);
    lc.admit(1, sta(6), &mut mux);
    lc.handle_timeout(400_000, &mut mux);
    assert_eq!(lc.stats().start_unicast, 1, "known station: no-op");
    // Too little evidence: stays.
    lc.report(SEC, sta(6), &rep(10, 0), 10, &mut mux);
    assert!(mux.is_unicast(sta(6)));
    lc.report(2 * SEC, sta(6), &rep(50, 0), 60, &mut mux);
    assert!(!mux.is_unicast(sta(6)));
    assert_eq!((lc.stats().start_cleared, lc.stats().to_multicast), (1, 0));
    // A lossy first report keeps the next one on unicast, as any lossy station.
    lc.admit(2 * SEC, sta(7), &mut mux);
    lc.handle_timeout(2 * SEC + 200_000, &mut mux);
    assert!(mux.is_unicast(sta(7)));
    lc.report(3 * SEC, sta(7), &rep(45, 5), 50, &mut mux);
    assert!(mux.is_unicast(sta(7)));
    assert!(!lc.stations().any(|s| s.fresh));
    // Off: nothing happens before the first report.
    let mut off = LossControl::new(LossConfig {
        start_unicast: false,
        ..LossConfig::default()
    });
    off.admit(0, sta(8), &mut mux);
    off.handle_timeout(SEC, &mut mux);
    assert!(!mux.is_unicast(sta(8)));
    assert_eq!(off.stats().start_unicast, 0);
    assert_eq!(off.stations().count(), 0, "no record before a report");
}

#[test]
fn start_guard_prices_new_stations_and_sheds_when_the_cell_does_not_fit() {
    let (phy, mut mux) = b11_airtime_mux();
    for n in 9..=13 {
        mux.add_stream(sta(n), 4000, u16::from(n)).unwrap();
    }
    // Prior: 50 packets/s of 60 bytes, 835 µs each at 11 Mbit/s: 0.042.
    let prior = 50.0 * phy.unicast_us(PRIOR_IP_BYTES) / 1e6;
    assert!((prior - 0.04175).abs() < 1e-9, "{prior}");
    // The trial's frames are priced by their own test.
    let mut lc = LossControl::new(LossConfig {
        airtime_budget: 0.1,
        start_unicast: true,
        start_trial: 0,
        ..LossConfig::default()
    });
    lc.admit(0, sta(9), &mut mux);
    lc.handle_timeout(200_000, &mut mux);
    assert!(mux.is_unicast(sta(9)), "2 x prior = 0.084 <= 0.1");
    assert_eq!(lc.poll_timeout(), Some(400_000), "next check");
    // It sends twice the prior's rate: 0.17 up + 0.17 down > 0.1.
    for k in 0..20u16 {
        let _ = mux.handle_packet(200_000 + u64::from(k) * 10_000, &voip_to(sta(9), 4000, k));
    }
    lc.handle_timeout(400_000, &mut mux);
    assert!(!mux.is_unicast(sta(9)), "0.33 > 0.1");
    assert_eq!(lc.stats().shed, 1);
    // The next one does not fit next to the measured one: held.
    lc.admit(500_000, sta(10), &mut mux);
    lc.handle_timeout(700_000, &mut mux);
    assert!(!mux.is_unicast(sta(10)));
    assert_eq!(lc.stats().start_held, 1);
    // Arrivals together: two would fit on unicast, three do not; all
    // are known at the first check, so none starts on unicast.
    let mut lc = LossControl::new(LossConfig {
        airtime_budget: 4.0 * prior + 1e-9,
        start_unicast: true,
        start_trial: 0,
        ..LossConfig::default()
    });
    lc.admit(0, sta(11), &mut mux);
    lc.admit(0, sta(12), &mut mux);
    lc.admit(10_000, sta(13), &mut mux);
    lc.handle_timeout(200_000, &mut mux);
    assert!(!mux.is_unicast(sta(11)) && !mux.is_unicast(sta(12)));
    lc.handle_timeout(210_000, &mut mux);
    assert!(!mux.is_unicast(sta(13)));
    assert_eq!((lc.stats().start_held, lc.stats().start_unicast), (3, 0));
    // One leaves: the two left fit, a later arrival's check sheds them.
    lc.forget(sta(13), &mut mux);
    let mut lc2 = LossControl::new(lc.config().clone());
    lc2.admit(0, sta(11), &mut mux);
    lc2.admit(0, sta(12), &mut mux);
    lc2.handle_timeout(200_000, &mut mux);
    assert!(mux.is_unicast(sta(11)) && mux.is_unicast(sta(12)));
    lc2.admit(300_000, sta(13), &mut mux);
    assert!(!mux.is_unicast(sta(11)) && !mux.is_unicast(sta(12)), "shed");
    assert_eq!(lc2.stats().shed, 2);
}

#[test]
fn waiting_station_gets_a_trial_and_joins_or_stays_by_its_report() {
    let mut mux = Mux::new(MuxConfig {
        idle_release: false,
        ..MuxConfig::default()
    });
    for n in 20..=22 {
        mux.add_stream(sta(n), 4000, u16::from(n)).unwrap();
    }
    let mut lc = LossControl::new(LossConfig::default());
    for n in 20..=22 {
        lc.admit(0, sta(n), &mut mux);
    }
    lc.handle_timeout(200_000, &mut mux);
    assert_eq!(lc.on_unicast(), 3, "all fit: all on unicast");
    assert!(!mux.is_trial(sta(20)));
    let v = mux.handle_packet(300_000, &voip_to(sta(20), 4000, 1));
    assert_eq!(v, Verdict::Unicast(UnicastReason::Loss), "no frame yet");
    // Its trial is due 1 s after its start (checks every 200 ms).
    let mut t = 400_000;
    while t < 1_200_000 {
        assert_eq!(lc.poll_timeout(), Some(t));
        lc.handle_timeout(t, &mut mux);
        assert!(!mux.is_trial(sta(20)), "t {t}");
        t += 200_000;
    }
    assert_eq!(lc.poll_timeout(), Some(1_200_000));
    lc.handle_timeout(1_200_000, &mut mux);
    assert!(mux.is_trial(sta(20)) && mux.is_unicast(sta(20)));
    assert_eq!(lc.stats().start_trials, 3);
    assert!(lc.stations().all(|s| s.trial && s.fresh && s.unicast));
    // Its packets now go in the frame and by unicast.
    let v = mux.handle_packet(1_210_000, &voip_to(sta(20), 4000, 2));
    assert_eq!(v, Verdict::Trial(20));
    mux.flush();
    let mut buf = vec![0u8; 2048];
    let t = mux.poll_transmit(1_210_000, &mut buf).unwrap();
    assert!(!t.unicast && t.packets == 1);
    assert_eq!((mux.stats().trial, mux.stats().queued), (1, 1));
    // Too little evidence: the trial goes on.
    lc.report(1_500_000, sta(20), &rep(15, 0), 15, &mut mux);
    assert!(mux.is_trial(sta(20)));
    // Clean: joins. Lossy (between clear and limit): stays on unicast.
    lc.report(2_000_000, sta(20), &rep(50, 0), 65, &mut mux);
    assert!(!mux.is_unicast(sta(20)) && !mux.is_trial(sta(20)));
    assert_eq!(lc.stats().start_cleared, 1);
    lc.report(2_000_000, sta(21), &rep(129, 1), 65, &mut mux);
    assert!(mux.is_unicast(sta(21)) && !mux.is_trial(sta(21)));
    assert!(!lc
        .stations()
        .any(|s| s.addr == sta(21) && (s.fresh || s.trial)));
    // No traffic: sta 22's trial waits on (1 frame sent in 5 s).
    lc.handle_timeout(6_200_000, &mut mux);
    assert!(mux.is_trial(sta(22)));
    // Frames sent, no report with evidence: the trial ends in the frame.
    for k in 0..20u16 {
        let _ = mux.handle_packet(
            7_000_000 + u64::from(k) * 20_000,
            &voip_to(sta(22), 4000, k),
        );
        mux.flush();
        while mux.poll_transmit(7_000_000, &mut buf).is_some() {}
    }
    lc.handle_timeout(11_199_999, &mut mux);
    assert!(mux.is_trial(sta(22)));
    lc.handle_timeout(11_200_000, &mut mux);
    assert!(!mux.is_unicast(sta(22)));
    assert_eq!(lc.stats().probes, 1);
    assert_eq!(lc.poll_timeout(), Some(30_200_000), "sta 21's probe");

    // The guard prices the trial frames: a budget the unicast cell
    // fits but not with the frames sheds the waiting stations.
    let (phy, mut mux) = b11_airtime_mux();
    mux.add_stream(sta(23), 4000, 1).unwrap();
    let prior = 50.0 * phy.unicast_us(PRIOR_IP_BYTES) / 1e6;
    let frames = 50.0 * phy.multicast_us(28 + 4 + PRIOR_IP_BYTES) / 1e6;
    assert_eq!(crate::downlink::compact::HEADER_LEN, 4);
    let cfg = LossConfig {
        airtime_budget: 2.0 * prior + frames + 1e-9,
        ..LossConfig::default()
    };
    let mut lc = LossControl::new(cfg.clone());
    lc.admit(0, sta(23), &mut mux);
    lc.handle_timeout(200_000, &mut mux);
    lc.handle_timeout(1_200_000, &mut mux);
    assert!(mux.is_trial(sta(23)), "fits with its frames");
    let mut lc = LossControl::new(LossConfig {
        airtime_budget: 2.0 * prior + frames - 1e-6,
        ..cfg
    });
    mux.set_unicast(sta(23), false);
    lc.admit(0, sta(23), &mut mux);
    lc.handle_timeout(200_000, &mut mux);
    assert!(
        !mux.is_unicast(sta(23)),
        "the start counts the trial frames"
    );
    assert_eq!(lc.stats().start_held, 1);
}

#[test]
fn report_window_takes_deltas() {
    let mut s = DemuxStats::default();
    let mut w = ReportWindow::new(&s);
    s.frames = 48;
    s.lost_frames = 2;
    s.recovered_frames = 1;
    assert_eq!(
        w.take(&s),
        LossReport {
            received: 48,
            missed: 2,
            unrecovered: 1
        }
    );
    s.frames = 98;
    assert_eq!(w.take(&s), rep(50, 0));
    let fresh = DemuxStats {
        frames: 3,
        ..DemuxStats::default()
    };
    assert_eq!(w.take(&fresh), rep(3, 0), "counters went backwards");
}

/// An IPv4/UDP/RTP packet to `dst`:`port` (RTP sequence `seq`).
pub(crate) fn voip_to(dst: IpAddr, port: u16, seq: u16) -> Vec<u8> {
    let IpAddr::V4(d) = dst else { unreachable!() };
    let payload = 20;
    let udp_len = 8 + 12 + payload;
    let total = 20 + udp_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[1] = 0xb8;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[192, 168, 9, 9]);
    p[16..20].copy_from_slice(&d.octets());
    let ipc = !crate::downlink::csum_fold(crate::downlink::csum_add(0, &p[..20]));
    p[10..12].copy_from_slice(&ipc.to_be_bytes());
    p[20..22].copy_from_slice(&5004u16.to_be_bytes());
    p[22..24].copy_from_slice(&port.to_be_bytes());
    p[24..26].copy_from_slice(&(udp_len as u16).to_be_bytes());
    p[28] = 0x80;
    p[29] = 18;
    p[30..32].copy_from_slice(&seq.to_be_bytes());
    p[32..36].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p[36..40].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    let src = IpAddr::V4(Ipv4Addr::new(192, 168, 9, 9));
    let c = crate::downlink::udp_checksum(&src, &dst, &p[20..]);
    let c = if c == 0 { 0xffff } else { c };
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}
