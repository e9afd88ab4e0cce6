//! Unit tests of [`super`] (config building, entry sizes, report parsing)
//! and one small simulated cell.

use super::*;
use crate::air_ns3;
use airpack_core::downlink::airtime::Rate;
use airpack_core::downlink::mux::Mux;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

fn args() -> CellSimArgs {
    CellSimArgs {
        presets: String::new(),
        codecs: String::new(),
        setups: String::new(),
        duration: 4.0,
        max_calls: Some(8),
        queue_limit: 50,
        out: None,
        loss_budget: None,
        loss_report_ms: 1000,
        loss_start_unicast: false,
        ap_vo: false,
        ap_vo_edca: "1,3,7,0".into(),
        send_jitter_us: 0,
        loss_start_frame: false,
        free_downlink: false,
        frame_copies: 1,
        airtime_rule: false,
        sta_vo_edca: None,
        sta_be_edca: None,
        frame_guard: false,
        uplink_agg: false,
        uplink_hold_us: None,
        uplink_agg_busy: false,
        call_arrival_ms: 0,
        replot: Vec::new(),
        replot_tags: None,
    }
}

#[test]
fn loss_directive_prices_the_presets_rates() {
    let phy = CellPhy {
        unicast: Rate::of(11.0, false).unwrap(),
        multicast: Rate::of(11.0, false).unwrap(),
    };
    let d = loss_directive(&LossConfig::default(), &phy, 60, 250);
    let v: Vec<f64> = d
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    // limit, clear, keep, min frames, period, budget, unicast price, multicast fixed, per byte
    assert_eq!(&v[..6], &[0.01, 0.005, 0.5, 20.0, 250_000.0, 1.0], "{d}");
    // 802.11b long preamble, 60-byte G.729 packet: 50 + 310 + 262 + 10 + 203 µs.
    assert_eq!(v[6], 835.0, "{d}");
    assert!((v[8] - 8.0 / 11.0).abs() < 0.01, "{d}");
    // new stations on unicast (default), price checks every 200 ms, trial after 1 s
    assert_eq!(&v[9..], &[1.0, 200_000.0, 1_000_000.0], "{d}");
    let off = LossConfig {
        start_unicast: false,
        ..LossConfig::default()
    };
    assert!(loss_directive(&off, &phy, 60, 250).ends_with(" 0 200000 1000000\n"));
}

fn work(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("cell-sim-{tag}-{}", std::process::id()))
}

/// The simulated tests' cell (`cell:b11:11`, G.729) and its scratch
/// directory, or None (after a SKIP line) without the ns-3 program.
fn b11_cell(tag: &str) -> Option<(PathBuf, ExperimentConfig)> {
    sim_cell(tag, "cell:b11:11", "g729")
}

/// [`b11_cell`] for another preset and codec.
fn sim_cell(tag: &str, preset: &str, codec: &str) -> Option<(PathBuf, ExperimentConfig)> {
    if let Err(why) = air_ns3::check_available() {
        eprintln!("SKIP: {why}");
        return None;
    }
    let w = work(tag);
    let c = config(preset, codec, &args(), &w).unwrap();
    Some((w, c))
}

fn spec_of(c: &ExperimentConfig, n: u32) -> (ExperimentConfig, Spec) {
    let mut c = c.clone();
    c.topo = c.topo.cell.clone().unwrap().topology(n);
    let s = serde_json::from_value(voip_spec(&c, &|_| "10.0.0.1".into(), n, 0)).unwrap();
    (c, s)
}

/// The sizes are the real mux's: G.729 full entries 47 bytes (sid, ctl,
/// len, 22-byte static block, 2-byte IP ID, 20 voice bytes), compressed
/// 25 (sid, ctl, len, ID LSB, seq LSB, 20), a full one every 16th; G.711's
/// length field takes 2 bytes (160 >= 128).
#[test]
fn entry_sizes_come_from_the_real_mux() {
    let (p, s) = entry_sizes(20, 160, 18).unwrap();
    assert_eq!(p, 16);
    assert_eq!(&s[..6], &[47, 47, 47, 47, 25, 25]);
    let tail = &s[s.len() - 16..];
    assert_eq!(tail.iter().filter(|&&x| x == 47).count(), 1);
    assert_eq!(tail.iter().filter(|&&x| x == 25).count(), 15);
    let (p, s) = entry_sizes(160, 160, 0).unwrap();
    assert_eq!(p, 16);
    assert!(
        s[s.len() - 16..].iter().all(|&x| x == 166 || x == 188),
        "{s:?}"
    );
    // the bound's steady-state cost (voice + 4) is within one byte of it
    assert_eq!(
        crate::downlink_bound::Layout::Compact.per_packet(&crate::downlink_bound::G729) + 1,
        25
    );
}

#[test]
fn config_has_cell_flows_cables_and_the_mux() {
    let c = config("cell:b11:11:2", "g729", &args(), &work("conf")).unwrap();
    let (c, s) = spec_of(&c, 3);
    // AP, S1, S2 (two calls per station), O1, O2
    assert_eq!(c.topo.nodes, ["AP", "S1", "S2", "O1", "O2"]);
    let flows = cell_flows(&c, &s, WARMUP_S, 0.0).unwrap();
    assert_eq!(flows.len(), 6);
    assert_eq!(
        (flows[0].path.clone(), flows[0].dir),
        (vec![1, 0, 3], Direction::AToB)
    );
    assert_eq!(
        (flows[1].path.clone(), flows[1].dir),
        (vec![3, 0, 1], Direction::BToA)
    );
    assert_eq!(flows[3].path, [4, 0, 1], "call 1: S1 <-> O2");
    assert_eq!(flows[5].path, [3, 0, 2], "call 2: S2 <-> O1");
    assert!(flows
        .iter()
        .all(|f| f.start_s >= WARMUP_S && f.start_s < WARMUP_S + 0.02));
    let (pk, rp) = (Path::new("/x/p.txt"), Path::new("/x/m.json"));
    let off = cell_config(&c, &s, &flows, WARMUP_S, None, pk, rp).unwrap();
    for want in [
        "mode infrastructure\n",
        "ap 0\n",
        "mcast_mbit 11\n",
        "path 1 3 0 1\n",
        "packets /x/p.txt\n",
        "duration_s 8.02\n", // warm-up 3 s + 20 ms + 4 s + 1 s grace
    ] {
        assert!(off.contains(want), "{want:?} missing:\n{off}");
    }
    assert!(off.contains("wired 0 3 100000000 1000 "), "{off}");
    assert!(!off.contains("mux_"), "{off}");
    let red = cell_config(&c, &s, &flows, WARMUP_S, Some(1), pk, rp).unwrap();
    assert!(red.contains("mux_ap 20000 1440 4 2 28 1\n"), "{red}");
    assert!(red.contains("mux_entry 16 47 47 47 47 25 "), "{red}");
    assert!(red.contains("mux_report /x/m.json\n"), "{red}");
    assert!(depth(Setup::DownlinkMuxAgg).is_err());
    assert!(config("string:1", "g729", &args(), &work("conf")).is_err());
}

#[test]
fn mux_report_parses_strictly() {
    let t = r#"{"frames":10,"entries":40,"frame_bytes":1100,"closed_size":2,"closed_interval":8,"repeated":30,
        "stations":[{"node":"S1","frames":9,"own":18,"recovered":2,"duplicates":16},
                    {"node":"S2","frames":10,"own":20,"recovered":0,"duplicates":18}]}"#;
    let r = MuxReport::parse(t).unwrap();
    assert_eq!(r.stations[0].recovered, 2);
    // 19 of 2 x 10 frames received; a third station that received none
    assert!((r.lost_frames_pct(2) - 5.0).abs() < 1e-9);
    assert!((r.lost_frames_pct(3) - 100.0 * 11.0 / 30.0).abs() < 1e-9);
    for bad in [
        t.replace("\"closed_size\":2", "\"closed_size\":3"),
        t.replace("\"entries\":40", "\"entries\":4"),
        t.replace("\"repeated\":30,", ""),
        "garbage".to_string(),
    ] {
        assert!(MuxReport::parse(&bad).is_err(), "{bad} accepted");
    }
}

/// Runs the ns-3 program (needs g++ and libns3-dev; builds it once): 4
/// G.729 calls in cell:b11:11, unicast and multiplexed with redundancy,
/// every packet arrives; with the mux the AP sends about one frame per
/// interval carrying the 4 downlink packets, the stations take theirs
/// only, and the downlink's delay grows by the wait for the interval.
#[test]
fn small_cell_carries_four_calls_with_and_without_the_mux() {
    let Some((w, c)) = b11_cell("small") else {
        return;
    };
    let off = cell_point(&c, Setup::Off, 4).unwrap();
    let line = crate::experiment::point_line;
    assert!(off.supported && off.loss_max == 0.0, "{}", line(&off));
    // no multiplexer; the stations associated within the warm-up (no re-run)
    assert_eq!(
        off.downlink.keys().collect::<Vec<_>>(),
        ["cell.assoc"],
        "{:?}",
        off.downlink
    );
    let a = &off.downlink["cell.assoc"];
    assert_eq!(a["warmup_s"], WARMUP_S, "{a}");
    assert!(
        a["associated"] == a["stations"]
            && a["last_assoc_us"].as_f64().unwrap() < a["first_packet_us"].as_f64().unwrap(),
        "{a}"
    );
    // every downlink packet was a unicast frame of the AP
    assert!(
        off.frames_per_node["AP"] >= 4 * 200,
        "{:?}",
        off.frames_per_node
    );
    let red = cell_point(&c, Setup::DownlinkMuxRed, 4).unwrap();
    let _ = std::fs::remove_dir_all(&w);
    assert!(red.supported && red.loss_max == 0.0, "{}", line(&red));
    let m: MuxReport = serde_json::from_value(red.downlink["AP.mux"].clone()).unwrap();
    // 200 or 201 packets per stream in 4 s, by its start phase
    assert!((800..=804).contains(&m.entries), "{m:?}");
    assert!((195..=215).contains(&m.frames), "{m:?}");
    assert!(m.repeated > 700, "{m:?}");
    assert_eq!(m.stations.len(), 4);
    for s in &m.stations {
        assert!((200..=201).contains(&(s.own + s.recovered)), "{s:?}");
    }
    // AP frames: the mux's (and beacons), not one per downlink packet
    assert!(red.frames_per_node["AP"] < 300, "{:?}", red.frames_per_node);
    let dl = |p: &Point| p.call_results[0]["b_to_a"]["delay_ms"].as_f64().unwrap();
    assert!(dl(&red) > dl(&off) + 5.0, "{} vs {}", dl(&red), dl(&off));
}

#[test]
fn ap_vo_edca_parses_strictly() {
    assert_eq!(parse_edca(&args().ap_vo_edca).unwrap(), AP_VO_DEFAULT);
    assert_eq!(parse_edca("2, 31,1023").unwrap(), [2, 31, 1023, 0]);
    assert_eq!(parse_edca("1,7,15,3264").unwrap(), [1, 7, 15, 3264]);
    for bad in [
        "",
        "1,3",
        "0,3,7",
        "16,3,7",
        "1,4,7",
        "1,7,3",
        "1,3,7,9000",
        "1,3,7,0,0",
        "a,3,7",
    ] {
        assert!(parse_edca(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(edca_directive(AP_VO_DEFAULT), "ap_edca 1 3 7 0\n");
}

/// Runs the ns-3 program: the same 4-call cell with the AP's voice on
/// AC_VO (`--ap-vo`): every packet arrives; with the mux every frame (and
/// nothing else of the AP's data) went through the AP's AC_VO queue; in
/// `off` every downlink packet did.
#[test]
fn small_cell_with_the_ap_on_ac_vo() {
    let Some((w, c)) = b11_cell("edca") else {
        return;
    };
    let line = crate::experiment::point_line;
    let vo = Knobs {
        edca: Some(AP_VO_DEFAULT),
        ..Knobs::default()
    };
    let off = cell_point_with(&c, Setup::Off, 4, vo).unwrap();
    let mux = cell_point_with(&c, Setup::DownlinkMux, 4, vo).unwrap();
    let _ = std::fs::remove_dir_all(&w);
    for p in [&off, &mux] {
        assert!(p.supported && p.loss_max == 0.0, "{}", line(p));
    }
    let e = |p: &Point, k: &str| p.downlink["AP.edca"][k].as_u64().unwrap();
    // 200 or 201 downlink packets per call in 4 s
    assert!(
        (800..=804).contains(&e(&off, "ap_vo_mpdus")),
        "{:?}",
        off.downlink
    );
    assert_eq!(e(&off, "tagged"), e(&off, "ap_vo_mpdus"));
    let m: MuxReport = serde_json::from_value(mux.downlink["AP.mux"].clone()).unwrap();
    assert_eq!(e(&mux, "ap_vo_mpdus"), m.frames, "{:?}", mux.downlink);
    for p in [&off, &mux] {
        assert_eq!(e(p, "ap_be_mpdus"), 0, "{:?}", p.downlink);
        assert_eq!((e(p, "aifsn"), e(p, "cwmin"), e(p, "cwmax")), (1, 3, 7));
        // as the MAC holds them at the end: the AP's AC_VO as asked, its
        // AC_BE and the stations' (after the beacons) at the DCF's access
        let a = |k: &str| p.downlink["AP.edca"][k].to_string();
        assert_eq!(a("ap_vo_access"), "[1,3,7]");
        assert_eq!(a("ap_be_access"), "[2,31,1023]");
        assert_eq!(a("sta_be_access"), "[2,31,1023]");
    }
}

/// Runs the ns-3 program: one multiplexed call with and without 1 ms of
/// send jitter. Exactly periodic, each downlink packet opens its own frame
/// (one per 20 ms); with jitter a packet that leaves early falls into the
/// frame its predecessor opened, so there are fewer frames, and every
/// packet still arrives.
#[test]
fn send_jitter_moves_packets_off_their_ticks() {
    let Some((w, c)) = b11_cell("jitter") else {
        return;
    };
    let exact = cell_point_with(&c, Setup::DownlinkMux, 1, Knobs::default()).unwrap();
    let jitter = Knobs {
        send_jitter_us: 1000,
        ..Knobs::default()
    };
    let jit = cell_point_with(&c, Setup::DownlinkMux, 1, jitter).unwrap();
    let _ = std::fs::remove_dir_all(&w);
    let line = crate::experiment::point_line;
    for p in [&exact, &jit] {
        assert!(p.supported && p.loss_max == 0.0, "{}", line(p));
    }
    let frames = |p: &Point| p.downlink["AP.mux"]["frames"].as_u64().unwrap();
    let entries = |p: &Point| p.downlink["AP.mux"]["entries"].as_u64().unwrap();
    assert_eq!(entries(&exact), entries(&jit));
    assert!((199..=201).contains(&frames(&exact)), "{}", frames(&exact));
    assert!(
        frames(&jit) < frames(&exact) * 9 / 10,
        "{} frames",
        frames(&jit)
    );
}

/// `--free-downlink`: each downlink becomes `[outer, station]` over a cable
/// of its own (one per pair, as rated as the outer nodes' cables), uplinks
/// keep their path through the AP.
#[test]
fn free_downlink_puts_each_downlink_on_a_cable() {
    let c = config("cell:b11:11:2", "g729", &args(), &work("free")).unwrap();
    let (mut c, s) = spec_of(&c, 3);
    let mut flows = cell_flows(&c, &s, WARMUP_S, 0.0).unwrap();
    let before = c.topo.wired.len();
    free_downlink(&mut c.topo, &mut flows);
    // AP, S1, S2, O1, O2; calls S1-O1, S1-O2, S2-O1
    assert_eq!(flows[0].path, [1, 0, 3], "uplink unchanged");
    assert_eq!(flows[1].path, [3, 1]);
    assert_eq!(flows[3].path, [4, 1]);
    assert_eq!(flows[5].path, [3, 2]);
    let pairs: Vec<(&str, &str)> = c.topo.wired[before..]
        .iter()
        .map(|w| (w.a.as_str(), w.b.as_str()))
        .collect();
    assert_eq!(pairs, [("O1", "S1"), ("O2", "S1"), ("O1", "S2")]);
    assert!(c.topo.wired[before..]
        .iter()
        .all(|w| w.rate_mbit == c.topo.wired[0].rate_mbit));
    let text = cell_config(
        &c,
        &s,
        &flows,
        WARMUP_S,
        None,
        Path::new("/x/p"),
        Path::new("/x/m"),
    )
    .unwrap();
    assert!(text.contains("path 1 3 1\n"), "{text}");
}

/// Runs the ns-3 program: 4 calls with free downlinks are supported and
/// the AP sends no voice on the air (its frames are beacons: fewer than a
/// tenth of the 800 downlink packets).
#[test]
fn small_cell_with_free_downlinks() {
    let Some((w, c)) = b11_cell("free-sim") else {
        return;
    };
    let free = Knobs {
        free_downlink: true,
        ..Knobs::default()
    };
    let p = cell_point_with(&c, Setup::Off, 4, free).unwrap();
    assert!(cell_point_with(&c, Setup::DownlinkMux, 4, free).is_err());
    let _ = std::fs::remove_dir_all(&w);
    let line = crate::experiment::point_line;
    assert!(p.supported && p.loss_max == 0.0, "{}", line(&p));
    assert!(p.frames_per_node["AP"] < 80, "{:?}", p.frames_per_node);
    assert!(p.frames_per_node["S1"] >= 200, "{:?}", p.frames_per_node);
}

/// Runs the ns-3 program: with `--frame-copies 2` the AP sends every
/// multiplexed frame twice and each station takes one of them (the other
/// counted as a copy), so the calls get every packet once.
#[test]
fn small_cell_with_frame_copies() {
    let Some((w, c)) = b11_cell("copies") else {
        return;
    };
    let two = Knobs {
        frame_copies: 2,
        ..Knobs::default()
    };
    let p = cell_point_with(&c, Setup::DownlinkMux, 4, two).unwrap();
    let _ = std::fs::remove_dir_all(&w);
    let line = crate::experiment::point_line;
    assert!(p.supported && p.loss_max == 0.0, "{}", line(&p));
    let m: MuxReport = serde_json::from_value(p.downlink["AP.mux"].clone()).unwrap();
    assert_eq!(m.stations.len(), 4);
    for s in &m.stations {
        assert_eq!(s.frames, m.frames, "{s:?}");
        assert_eq!(s.copies, m.frames, "{s:?}");
        assert!((200..=201).contains(&s.own), "{s:?}");
    }
    // the AP's frames: two per multiplexed frame, plus beacons
    let ap = p.frames_per_node["AP"];
    assert!(ap >= 2 * m.frames && ap < 2 * m.frames + 80, "{ap} {m:?}");
}

/// Frames sent, frames the airtime rule sent as unicast and further copies
/// it priced out when `stations`
/// stations each get one `payload`-byte RTP packet per 20 ms for 50
/// intervals through airpack-core's [`Mux`] with the daemon's airtime rule
/// (unicast at `uni`, multicast at `mc` Mbit/s, long preamble) and
/// `copies` copies per frame; every packet leaves (multiplexed or unicast).
fn rule_frames(uni: f64, mc: f64, copies: u8, payload: usize, stations: u8) -> (u64, u64, u64) {
    let mut m = Mux::new(MuxConfig {
        airtime: Some(CellPhy {
            unicast: Rate::of(uni, false).unwrap(),
            multicast: Rate::of(mc, false).unwrap(),
        }),
        copies,
        idle_release: false,
        ..MuxConfig::default()
    });
    for s in 0..stations {
        let a = IpAddr::V4(Ipv4Addr::new(10, 201, 0, 2 + s));
        m.add_stream(a, 16000, u16::from(s) + 1).unwrap();
    }
    let mut buf = vec![0u8; m.config().max_frame];
    let (mut packets, intervals) = (0u64, 50u16);
    for k in 0..intervals {
        for s in 0..stations {
            let now = u64::from(k) * 20_000 + u64::from(s) * 100;
            let p = voip_packet_to(2 + s, k, 160, 0, 100 + k, payload);
            m.handle_packet(now, &p);
            while let Some(t) = m.poll_transmit(now, &mut buf) {
                packets += t.packets as u64;
            }
        }
    }
    m.flush();
    while let Some(t) = m.poll_transmit(u64::from(intervals) * 20_000, &mut buf) {
        packets += t.packets as u64;
    }
    let st = m.stats();
    assert_eq!(packets, u64::from(stations) * u64::from(intervals));
    assert_eq!(
        (st.dropped, st.copies + st.copies_priced_out),
        (0, st.frames_sent() * (u64::from(copies) - 1))
    );
    (st.frames_sent(), st.fallback_frames, st.copies_priced_out)
}

/// The daemon's airtime rule prices every copy (`ap.frame_copies`), so
/// copies never make the AP multicast what unicast carries in less airtime
/// (docs/results.md, "Frame copies in every configuration"): 802.11b at 11
/// with multicast at 2 Mbit/s, a full G.711 frame (8 entries, 6.1 ms per
/// copy) beats its packets as unicast (7.5 ms) once, not twice: with 2
/// copies every frame is sent once, its copy priced out; G.729 frames stay
/// multiplexed with 2 copies. 802.11g at 54 with multicast at 6: a G.711
/// frame (2.0 ms) costs more than its packets at 54 (1.6 ms) already once:
/// unicast.
#[test]
fn airtime_rule_prices_out_copies_that_cost_more_than_unicast() {
    const G711: usize = 160;
    const G729: usize = 20;
    let (sent, fallback, _) = rule_frames(11.0, 2.0, 1, G711, 8);
    assert!(
        sent >= 45 && fallback <= 2,
        "b11 mc2 G.711, 1 copy: {sent} sent, {fallback} unicast"
    );
    let (sent, fallback, priced) = rule_frames(11.0, 2.0, 2, G711, 8);
    assert!(
        sent >= 45 && fallback <= 2 && priced == sent,
        "b11 mc2 G.711, 2 copies: {sent} sent once, {fallback} unicast, {priced} copies priced out"
    );
    let (sent, fallback, _) = rule_frames(11.0, 2.0, 2, G729, 20);
    assert!(
        sent >= 45 && fallback == 0,
        "b11 mc2 G.729, 2 copies: {sent} sent, {fallback} unicast"
    );
    let (sent, fallback, _) = rule_frames(54.0, 6.0, 1, G711, 8);
    assert!(
        sent == 0 && fallback >= 50,
        "g54 mc6 G.711, 1 copy: {sent} sent, {fallback} unicast"
    );
    let (sent, fallback, _) = rule_frames(54.0, 54.0, 4, G711, 8);
    assert!(
        sent >= 45 && fallback <= 2,
        "g54 mc54 G.711, 4 copies: {sent} sent, {fallback} unicast"
    );
}

/// The airtime rule's table of a preset and codec with `copies` copies
/// configured, as `cell_point` computes it for `--airtime-rule`.
fn preset_rule(preset: &str, codec: &str, copies: u8) -> Vec<u8> {
    let c = config(preset, codec, &args(), &work("rule")).unwrap();
    let (c, spec) = spec_of(&c, 1);
    let profile = spec.profile().unwrap();
    let payload = airpack_voice::rtp::probe_payload_len(profile.payload_bytes());
    rule_table(
        cell_phy(&c).unwrap(),
        copies,
        payload,
        profile.timestamp_step(),
        profile.params().payload_type,
    )
    .unwrap()
}

/// `--airtime-rule`: the table is airpack-core's own verdict per frame
/// size (`Mux::close` driven with the preset's rates, 2 copies configured).
/// G.711 at 54 with multicast at 6: no frame pays, every frame leaves as
/// unicast. 802.11b at 11 with multicast at 2, G.711: a full frame (8
/// entries) is sent once, its second copy priced out (6.1 ms per copy
/// against 7.5 ms as unicast), frames of up to 4 packets as unicast. G.729
/// at 54 with multicast at 54: every frame of 2 or more entries is sent
/// twice, a lone entry once. The tables end at the most entries a frame
/// holds (G.711 7 when every entry is full, as after a fallback frame, 8
/// compressed; G.729 57); the directive lists the table.
#[test]
fn rule_table_is_the_real_muxs_verdict() {
    let g54mc6 = preset_rule("cell:g54:6:4", "g711", 2);
    assert_eq!(g54mc6, vec![0; 7], "g54 mc6 G.711");
    let b11mc2 = preset_rule("cell:b11:2", "g711", 2);
    assert_eq!(b11mc2, vec![0, 0, 0, 0, 1, 1, 1, 1], "b11 mc2 G.711");
    let g54mc54 = preset_rule("cell:g54:54:4", "g729", 2);
    assert_eq!(g54mc54.len(), 57, "g54 mc54 G.729 {g54mc54:?}");
    assert!(
        g54mc54[0] == 1 && g54mc54[1..].iter().all(|&c| c == 2),
        "g54 mc54 G.729 {g54mc54:?}"
    );
    // with one copy configured the rule never adds one
    let one = preset_rule("cell:g54:54:4", "g729", 1);
    assert!(one.iter().all(|&c| c == 1), "{one:?}");
    assert_eq!(rule_directive(&b11mc2), "mux_rule 0 0 0 0 1 1 1 1\n");
}

/// Runs the ns-3 program: `--airtime-rule` with 2 copies in the 802.11b
/// cell with multicast at 2 Mbit/s and G.711, 4 calls: a frame holds at
/// most 4 entries, which the rule sends as unicast, so no frame is
/// multicast, every closed frame's packets leave as unicast (counted in
/// the report) and every packet arrives; without the rule the same point
/// multicasts every frame twice.
#[test]
fn small_cell_with_the_airtime_rule() {
    let Some((w, c)) = sim_cell("rule", "cell:b11:2", "g711") else {
        return;
    };
    let two = Knobs {
        frame_copies: 2,
        ..Knobs::default()
    };
    let rule = Knobs {
        airtime_rule: true,
        ..two
    };
    let p = cell_point_with(&c, Setup::DownlinkMux, 4, rule).unwrap();
    let plain = cell_point_with(&c, Setup::DownlinkMux, 4, two).unwrap();
    let _ = std::fs::remove_dir_all(&w);
    let line = crate::experiment::point_line;
    for p in [&p, &plain] {
        assert!(p.supported && p.loss_max == 0.0, "{}", line(p));
    }
    let v = &p.downlink["AP.mux"];
    assert_eq!(v["rule_table"], serde_json::json!([0, 0, 0, 0, 1, 1, 1, 1]));
    let m: MuxReport = serde_json::from_value(v.clone()).unwrap();
    assert_eq!((m.frames, m.rule_copies_priced_out), (0, 0), "{m:?}");
    assert!(m.stations.is_empty(), "{m:?}");
    assert_eq!(m.closed_size + m.closed_interval, m.rule_unicast_frames);
    assert!(m.rule_unicast_frames >= 200, "{m:?}");
    assert!((800..=804).contains(&m.rule_unicast_packets), "{m:?}");
    // the AP's frames: every downlink packet as unicast, plus beacons
    let ap = p.frames_per_node["AP"];
    assert!(
        ap >= m.rule_unicast_packets && ap < m.rule_unicast_packets + 80,
        "{ap}"
    );
    let m: MuxReport = serde_json::from_value(plain.downlink["AP.mux"].clone()).unwrap();
    assert_eq!((m.rule_unicast_frames, m.rule_unicast_packets), (0, 0));
    assert!(
        m.frames >= 200 && m.stations.iter().all(|s| s.copies == m.frames),
        "{m:?}"
    );
}

/// Runs the ns-3 program: with `--sta-vo-edca` / `--sta-be-edca` the
/// stations' AC_VO / AC_BE stay at the given values after the AP's beacons
/// and association responses (without them, they take the AP's AC_VO,
/// `small_cell_with_the_ap_on_ac_vo`, and the DCF's AC_BE).
#[test]
fn small_cell_keeps_the_stations_access() {
    let Some((w, c)) = b11_cell("stavo") else {
        return;
    };
    let k = Knobs {
        edca: Some([1, 1, 1, 0]),
        sta_vo: Some([2, 7, 15]),
        sta_be: Some([3, 31, 1023]),
        ..Knobs::default()
    };
    let p = cell_point_with(&c, Setup::DownlinkMux, 4, k).unwrap();
    let _ = std::fs::remove_dir_all(&w);
    let e = &p.downlink["AP.edca"];
    assert_eq!(e["ap_vo_access"], serde_json::json!([1, 1, 1]), "{e}");
    assert_eq!(e["sta_vo_access"], serde_json::json!([2, 7, 15]), "{e}");
    assert_eq!(e["sta_be_access"], serde_json::json!([3, 31, 1023]), "{e}");
    assert_eq!(e["ap_be_access"], serde_json::json!([2, 31, 1023]), "{e}");
    assert!(p.supported, "{}", crate::experiment::point_line(&p));
}

/// `assoc_stagger_ms`: the k-th station looks for the AP from k x the
/// stagger, so with 4 stations 500 ms apart the last joins after 1.5 s
/// (without it all join at the first beacons, within half a second); the
/// calls after the warm-up are carried the same.
#[test]
fn stations_join_one_by_one_when_staggered() {
    let Some((w, c)) = b11_cell("stagger") else {
        return;
    };
    let at = |stagger| cell_point_at(&c, Setup::Off, 4, Knobs::default(), 3.0, stagger);
    let (plain, staggered) = (at(0).unwrap(), at(500).unwrap());
    let _ = std::fs::remove_dir_all(&w);
    let last = |p: &Point| p.downlink["cell.assoc"]["last_assoc_us"].as_f64().unwrap() / 1e6;
    for p in [&plain, &staggered] {
        let a = &p.downlink["cell.assoc"];
        assert_eq!(a["associated"], a["stations"], "{a}");
        assert!(p.supported, "{}", crate::experiment::point_line(p));
    }
    assert!(last(&plain) < 0.5, "{}", last(&plain));
    assert!(
        (1.5..2.5).contains(&last(&staggered)),
        "{}",
        last(&staggered)
    );
    assert_eq!(staggered.downlink["cell.assoc"]["stagger_ms"], 500);
}

#[path = "cell_sim_tests_uplink.rs"]
mod uplink;
