//! Property tests of the loss rule (issue 14 point 10, `downlink::loss`)
//! driving a real `Mux` with simulated time: a station whose reports show
//! loss above the limit gets no multiplexed packet from its first report
//! (the hysteresis period: enough evidence, here one report) until its
//! probe, and again from the report after the probe; a clean station is
//! never moved; every packet handed to the mux is passed, handed back
//! (counted by reason), or multiplexed and then sent, dropped or pending.
//! With the airtime rule, the guard never lets the estimated load pass the
//! budget by a move. A new station (admitted at its lease) is never
//! multiplexed before a clean report unless the guard forbids unicast
//! (started in the frame, or shed), and the mux's accounting holds. With
//! the default start (new stations on unicast, a short first probe), in a
//! cell where every station fits on unicast and frames reach each station
//! as its own loss pattern says: a clean station joins the frame within
//! its check, its trial delay and two report periods; a lossy one never
//! joins; a station on unicast never has a packet only in a frame.
//!
//! Owns nothing but these checks.

use airpack_core::downlink::airtime::{CellPhy, Rate};
use airpack_core::downlink::loss::{LossConfig, LossControl};
use airpack_core::downlink::mux::{Mux, MuxConfig, UnicastReason, Verdict};
use airpack_core::downlink::register::LossReport;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

const MS: u64 = 1_000;
const SEC: u64 = 1_000_000;

fn sta(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10 + i as u8))
}

/// An 802.11b cell at 11 Mbit/s (unicast and multicast) and a mux with
/// one stream for each of `stations` (the airtime rule on if `airtime`).
fn cell(stations: usize, airtime: bool) -> Mux {
    let phy = CellPhy {
        unicast: Rate::of(11.0, false).unwrap(),
        multicast: Rate::of(11.0, false).unwrap(),
    };
    let mut mux = Mux::new(MuxConfig {
        idle_release: false,
        airtime: airtime.then_some(phy),
        ..MuxConfig::default()
    });
    for i in 0..stations {
        mux.add_stream(sta(i), 4000, i as u16).unwrap();
    }
    mux
}

/// RFC 1071 sum.
fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A G.729-sized IPv4/UDP/RTP packet to station `i`, port 4000.
fn packet(i: usize, seq: u16) -> Vec<u8> {
    let IpAddr::V4(d) = sta(i) else {
        unreachable!()
    };
    let s = [192u8, 168, 9, 9];
    let udp_len = 8 + 12 + 20;
    let total = 20 + udp_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&s);
    p[16..20].copy_from_slice(&d.octets());
    let c = csum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&5004u16.to_be_bytes());
    p[22..24].copy_from_slice(&4000u16.to_be_bytes());
    p[24..26].copy_from_slice(&(udp_len as u16).to_be_bytes());
    p[28] = 0x80;
    p[29] = 18;
    p[30..32].copy_from_slice(&seq.to_be_bytes());
    p[32..36].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p[36..40].copy_from_slice(&(i as u32 + 1).to_be_bytes());
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&s);
    pseudo.extend_from_slice(&d.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    pseudo.extend_from_slice(&p[20..]);
    let c = match csum(&pseudo) {
        0 => 0xffff,
        c => c,
    };
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

fn accounting_holds(mux: &Mux) {
    let s = mux.stats();
    assert_eq!(
        s.handled,
        s.passed + s.unicast.iter().sum::<u64>() + s.queued
    );
    assert_eq!(
        s.queued,
        s.sent_packets + s.fallback + s.dropped + mux.pending() as u64
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn lossy_station_is_unicast_from_its_report_until_its_probe(
        missed_a in prop::collection::vec(2u32..=50, 70),
        missed_others in prop::collection::vec(0u32..3, 70 * 2),
        reports in 3usize..70,
        late in prop::collection::vec(0u64..900 * MS, 70),
        drain_every in 1usize..5,
    ) {
        // Stations 0 (lossy: 4-100 % every report), 1 and 2 (0-4 %), 3 (clean).
        let mut mux = Mux::new(MuxConfig { idle_release: false, ..MuxConfig::default() });
        for i in 0..4 {
            mux.add_stream(sta(i), 4000, i as u16).unwrap();
        }
        let mut lc = LossControl::new(LossConfig::default());
        let mut buf = vec![0u8; 2048];
        // The spec's model of station 0: unicast from a report, a trial
        // after 30 s, then 60 s, ... (each failed trial doubles the wait).
        let (mut a_unicast, mut a_probe_at, mut a_wait) = (false, 0u64, 30 * SEC);
        let (mut a_probes, mut seq, mut frames) = (0u64, 0u16, 0u64);
        for k in 0..reports {
            // One second of 20 ms packets for every station.
            for j in 0..50u64 {
                let now = k as u64 * SEC + j * 20 * MS;
                lc.handle_timeout(now, &mut mux);
                if a_unicast && now >= a_probe_at {
                    a_unicast = false;
                    a_probes += 1;
                    a_wait = (2 * a_wait).min(240 * SEC);
                }
                seq = seq.wrapping_add(1);
                for i in 0..4 {
                    let v = mux.handle_packet(now, &packet(i, seq));
                    let want_unicast = i == 0 && a_unicast;
                    if want_unicast {
                        prop_assert_eq!(v, Verdict::Unicast(UnicastReason::Loss), "k {} j {}", k, j);
                    } else if i == 0 || i == 3 {
                        prop_assert_eq!(v, Verdict::Queued(i as u16), "station {} k {} j {}", i, k, j);
                    }
                }
                mux.handle_timeout(now);
                if j as usize % drain_every == 0 {
                    while let Some(t) = mux.poll_transmit(now, &mut buf) {
                        frames += u64::from(!t.unicast);
                    }
                }
                accounting_holds(&mux);
            }
            // Reports arrive some time into the next second's first interval.
            let now = (k as u64 + 1) * SEC - 20 * MS + late[k] / 50;
            let rep = |m: u32| LossReport { received: 50 - m, missed: m, unrecovered: m };
            lc.report(now, sta(0), &rep(missed_a[k]), frames, &mut mux);
            if !a_unicast {
                a_unicast = true;
                a_probe_at = now + a_wait;
            }
            for i in 1..3 {
                lc.report(now, sta(i), &rep(missed_others[2 * k + i - 1]), frames, &mut mux);
            }
            lc.report(now, sta(3), &rep(0), frames, &mut mux);
            prop_assert!(mux.is_unicast(sta(0)));
            prop_assert!(!mux.is_unicast(sta(3)));
        }
        let s = lc.stats();
        prop_assert!(s.probes >= a_probes);
        prop_assert!(s.to_unicast > a_probes, "every trial failed and moved it back");
        prop_assert_eq!(s.reports, 4 * reports as u64);
    }

    #[test]
    fn airtime_guard_keeps_the_estimated_load_within_budget(
        stations in 2usize..12,
        budget_pct in 5u32..120,
        lossy_mask in any::<u16>(),
    ) {
        let mut mux = cell(stations, true);
        let budget = f64::from(budget_pct) / 100.0;
        let mut lc = LossControl::new(LossConfig { airtime_budget: budget, ..LossConfig::default() });
        let mut buf = vec![0u8; 2048];
        let mut frames = 0;
        for k in 0..6u64 {
            for j in 0..50u64 {
                let now = k * SEC + j * 20 * MS;
                for i in 0..stations {
                    mux.handle_packet(now, &packet(i, (k * 50 + j) as u16));
                }
                mux.handle_timeout(now);
                while let Some(t) = mux.poll_transmit(now, &mut buf) {
                    frames += u64::from(!t.unicast);
                }
            }
            let now = (k + 1) * SEC;
            for i in 0..stations {
                let m = if lossy_mask >> i & 1 == 1 { 10 } else { 0 };
                let before = lc.on_unicast();
                let r = LossReport { received: 50 - m, missed: m, unrecovered: m };
                lc.report(now, sta(i), &r, frames, &mut mux);
                if lc.on_unicast() > before {
                    prop_assert!(lc.load() <= budget + 1e-9, "moved past the budget: {}", lc.load());
                }
            }
            accounting_holds(&mux);
        }
        // Stations reporting no loss are never moved.
        for i in 0..stations {
            if lossy_mask >> i & 1 == 0 {
                prop_assert!(!mux.is_unicast(sta(i)));
            }
        }
    }

    #[test]
    fn new_station_is_never_multiplexed_before_a_clean_report_unless_the_guard_forbids(
        stations in 2usize..10,
        admit_sec in prop::collection::vec(0u64..5, 10),
        admit_ms in prop::collection::vec(0u64..50, 10),
        missed in prop::collection::vec(prop_oneof![Just(0u32), Just(0), 1u32..4], 10 * 8),
        budget_pct in prop_oneof![Just(400u32), 5u32..150],
        airtime in any::<bool>(),
    ) {
        let mut mux = cell(stations, airtime);
        let budget = f64::from(budget_pct) / 100.0;
        let cfg = LossConfig { airtime_budget: budget, start_unicast: true, ..LossConfig::default() };
        let (clear, min_frames, check_us) = (cfg.clear, f64::from(cfg.min_frames), cfg.start_check);
        let mut lc = LossControl::new(cfg);
        let mut buf = vec![0u8; 2048];
        let mut frames = 0;
        // Lease time (20 ms steps), then whether it may be multiplexed: a
        // clean report, or the guard (held at its start, or shed).
        let mut admitted: Vec<Option<u64>> = vec![None; stations];
        let mut allowed = vec![false; stations];
        // Stations past their first check in the frame without a clean
        // report: each needs a hold or a shed counted.
        let guard = |lc: &LossControl| lc.stats().shed + lc.stats().start_held;
        let check = |now: u64, mux: &Mux, admitted: &[Option<u64>], allowed: &mut [bool], explained: u64| {
            let framed: Vec<usize> = (0..stations)
                .filter(|&i| admitted[i].is_some_and(|t| now >= t + check_us))
                .filter(|&i| !allowed[i] && !mux.is_unicast(sta(i)))
                .collect();
            assert!(framed.len() as u64 <= explained, "{:?} in the frame, {} guard decisions at {}", framed, explained, now);
            for i in framed {
                allowed[i] = true;
            }
        };
        let mut explained = 0;
        for k in 0..8u64 {
            for j in 0..50u64 {
                let now = k * SEC + j * 20 * MS;
                for i in 0..stations {
                    if admitted[i].is_none() && admit_sec[i] == k && admit_ms[i] == j {
                        admitted[i] = Some(now);
                        let g = guard(&lc);
                        lc.admit(now, sta(i), &mut mux);
                        explained += guard(&lc) - g;
                        check(now.saturating_sub(1), &mux, &admitted, &mut allowed, explained);
                    }
                }
                let g = guard(&lc);
                lc.handle_timeout(now, &mut mux);
                if airtime && budget < 4.0 {
                    explained += guard(&lc) - g;
                } else {
                    prop_assert_eq!(guard(&lc), g, "the guard acted without prices or with room");
                }
                check(now, &mux, &admitted, &mut allowed, explained);
                for i in 0..stations {
                    let v = mux.handle_packet(now, &packet(i, (k * 50 + j) as u16));
                    if mux.is_trial(sta(i)) {
                        prop_assert_eq!(v, Verdict::Trial(i as u16));
                    } else if mux.is_unicast(sta(i)) {
                        prop_assert_eq!(v, Verdict::Unicast(UnicastReason::Loss));
                    }
                }
                mux.handle_timeout(now);
                while let Some(t) = mux.poll_transmit(now, &mut buf) {
                    frames += u64::from(!t.unicast);
                }
                accounting_holds(&mux);
            }
            let now = (k + 1) * SEC;
            for i in (0..stations).filter(|&i| admitted[i].is_some()) {
                let m = missed[8 * i + k as usize];
                let r = LossReport { received: 50 - m, missed: m, unrecovered: m };
                let g = guard(&lc);
                lc.report(now, sta(i), &r, frames, &mut mux);
                explained += guard(&lc) - g;
                let st = lc.stations().find(|s| s.addr == sta(i)).unwrap();
                if st.evidence >= min_frames && st.loss.is_some_and(|l| l < clear) {
                    allowed[i] = true;
                }
                // Before the timeouts due at `now` (the next step runs them).
                check(now.saturating_sub(1), &mux, &admitted, &mut allowed, explained);
            }
        }
        // With room (no prices, or a budget of 4) every new station went to
        // unicast: at its start, or by a lossy report before it.
        if !airtime || budget >= 4.0 {
            let s = lc.stats();
            prop_assert!(s.start_unicast + s.to_unicast >= admitted.iter().flatten().count() as u64);
        }
    }

    #[test]
    fn waiting_station_is_measured_and_joins_when_clean_never_when_lossy(
        stations in 1usize..8,
        admit_at in prop::collection::vec(0u64..150, 8),
        // 0: clean air; n: every n-th frame lost at that station (5-50 %).
        drop_every in prop::collection::vec(prop_oneof![Just(0u64), 2u64..=20], 8),
        phase in prop::collection::vec(0u64..20, 8),
        airtime in any::<bool>(),
        report_late in 0u64..15,
    ) {
        let mut mux = cell(stations, airtime);
        // The default rule, with room for the whole cell on unicast and
        // its trial frames (so the guard never decides).
        let cfg = LossConfig { airtime_budget: 4.0, ..LossConfig::default() };
        prop_assert!(cfg.start_unicast && cfg.start_trial > 0);
        let bound = cfg.start_check + cfg.start_trial + 2 * SEC + 100 * MS;
        let check_us = cfg.start_check;
        let mut lc = LossControl::new(cfg);
        let mut buf = vec![0u8; 2048];
        let admitted_at = |i: usize| admit_at[i] * 20 * MS;
        let mut admitted = vec![false; stations];
        // Each station's window: frames received and lost since its report.
        let mut window = vec![(0u32, 0u32); stations];
        let mut joined: Vec<Option<u64>> = vec![None; stations];
        let (mut frames, mut sent) = (0u64, 0u64);
        for k in 0..12u64 {
            for j in 0..50u64 {
                let now = k * SEC + j * 20 * MS;
                for (i, a) in admitted.iter_mut().enumerate() {
                    if !*a && now >= admitted_at(i) {
                        *a = true;
                        lc.admit(now, sta(i), &mut mux);
                    }
                }
                lc.handle_timeout(now, &mut mux);
                for i in (0..stations).filter(|&i| admitted[i]) {
                    let past_check = now >= admitted_at(i) + check_us;
                    let unicast = mux.is_unicast(sta(i));
                    if past_check && !unicast && joined[i].is_none() {
                        joined[i] = Some(now);
                    }
                    if drop_every[i] > 0 && past_check {
                        prop_assert!(unicast, "lossy station {} joined at {}", i, now);
                    }
                    let trial = mux.is_trial(sta(i));
                    prop_assert!(!trial || unicast);
                    let v = mux.handle_packet(now, &packet(i, (k * 50 + j) as u16));
                    match v {
                        // Never only in a frame while on unicast.
                        Verdict::Queued(_) => prop_assert!(!unicast, "station {} at {}", i, now),
                        Verdict::Trial(_) => prop_assert!(trial),
                        Verdict::Unicast(r) => {
                            prop_assert_eq!(r, UnicastReason::Loss);
                            prop_assert!(unicast && !trial);
                        }
                        Verdict::Pass => prop_assert!(false, "registered"),
                    }
                }
                mux.handle_timeout(now);
                while let Some(t) = mux.poll_transmit(now, &mut buf) {
                    if t.unicast {
                        continue;
                    }
                    frames += 1;
                    for i in (0..stations).filter(|&i| admitted[i]) {
                        let n = drop_every[i];
                        if n > 0 && (frames + phase[i]) % n == 0 {
                            window[i].1 += 1;
                        } else {
                            window[i].0 += 1;
                        }
                    }
                }
                accounting_holds(&mux);
            }
            sent = mux.stats().frames_sent();
            let now = (k + 1) * SEC + report_late * MS;
            for i in (0..stations).filter(|&i| admitted[i]) {
                let (received, missed) = std::mem::take(&mut window[i]);
                let r = LossReport { received, missed, unrecovered: missed };
                lc.report(now, sta(i), &r, sent, &mut mux);
            }
        }
        let s = lc.stats();
        prop_assert_eq!(s.shed + s.start_held + s.held_airtime, 0, "room: the guard never decides");
        prop_assert!(sent > 0, "frames were sent although every station started on unicast");
        for i in 0..stations {
            let t0 = admitted_at(i);
            if drop_every[i] == 0 {
                let t = joined[i];
                prop_assert!(t.is_some_and(|t| t <= t0 + bound), "clean station {} (admitted {}) joined at {:?}", i, t0, t);
            } else {
                prop_assert!(joined[i].is_none());
            }
        }
        prop_assert_eq!(s.start_unicast, stations as u64, "every station started on unicast");
    }
}
