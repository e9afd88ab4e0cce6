//! Tests of `[ap]` and `[station]` parsing and validation.

use super::super::parse;
use super::*;

const K: &str = "00112233445566778899aabbccddeeff";

fn err(text: &str) -> String {
    format!("{:#}", parse("t.toml", text, &[], &[]).unwrap_err())
}

#[test]
fn ap_alone_needs_no_peer_and_gets_the_seed_defaults() {
    let p = parse(
        "t.toml",
        &format!("[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\n"),
        &[],
        &[],
    )
    .unwrap();
    assert!(p.peers.is_empty());
    let ap = p.ap.expect("ap plan");
    assert_eq!(
        ap.destination,
        Destination::Group("225.0.0.10:8888".parse().unwrap())
    );
    assert_eq!(ap.mux.interval, 20_000);
    assert_eq!(ap.mux.max_frame, 1440);
    assert_eq!(ap.mux.format, Format::Compact);
    assert_eq!(ap.media_ports, (16_384, 32_767));
    assert_eq!(ap.lease.auto_ports, (16_384, 32_767));
    assert!(p.station.is_none());
}

#[test]
fn ap_errors_name_the_key() {
    let base = format!("[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\n");
    let e = err("[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\n");
    assert!(e.contains("ap.key") && e.contains("required"), "{e}");
    let e = err(&format!("{base}group = \"10.0.0.1\"\n"));
    assert!(e.contains("t.toml:5: key `ap.group`"), "{e}");
    let e = err(&format!("[ap]\nenabled = true\nkey = \"{K}\"\n"));
    assert!(e.contains("ap.interfaces"), "{e}");
    let e = err(&format!("{base}max_frame = 100\n"));
    assert!(e.contains("ap.max_frame") && e.contains("128-"), "{e}");
    let e = err(&format!("{base}registration_port = 8888\n"));
    assert!(e.contains("ap.registration_port"), "{e}");
    let e = err(&format!("{base}media_ports = \"8000-9000\"\n"));
    assert!(e.contains("ap.media_ports") && e.contains("8888"), "{e}");
    let e = err(&format!("{base}max_streams = 40000\n"));
    assert!(e.contains("ap.max_streams") && e.contains("1-32768"), "{e}");
    let e = err(&format!("{base}format = \"zip\"\n"));
    assert!(e.contains("format"), "{e}");
    let e = err(&format!("{base}unicast = \"225.0.0.1:9\"\n"));
    assert!(e.contains("ap.unicast"), "{e}");
    let e = err("[ap]\nkey = \"zz\"\n");
    assert!(e.contains("ap.key"), "{e}");
    // Unicast needs no interface.
    let p = parse(
        "t.toml",
        &format!(
            "[ap]\nenabled = true\nkey = \"{K}\"\nunicast = \"10.0.0.5:7000\"\nformat = \"seed\"\n"
        ),
        &[],
        &[],
    )
    .unwrap();
    let ap = p.ap.unwrap();
    assert_eq!(
        ap.destination,
        Destination::Unicast("10.0.0.5:7000".parse().unwrap())
    );
    assert_eq!(ap.mux.format, Format::Seed);
}

#[test]
fn station_ports_single_range_auto() {
    let s = |v: &str| {
        let p = parse(
            "t.toml",
            &format!("[station]\nenabled = true\ninterface = \"wlan0\"\nap = \"10.0.0.1\"\nkey = \"{K}\"\nports = {v}\n"),
            &[],
            &[],
        )
        .unwrap();
        assert!(p.peers.is_empty() && p.ap.is_none());
        p.station.unwrap()
    };
    assert_eq!(s("5004").ports, Ports::Single(5004));
    assert_eq!(s("\"5004\"").ports, Ports::Single(5004));
    assert_eq!(s("\"16384-16400\"").ports, Ports::Range(16_384, 16_400));
    assert_eq!(s("\"auto\"").ports, Ports::Auto);
    let st = s("5004");
    assert_eq!(st.registration, "10.0.0.1:8889".parse().unwrap());
    assert_eq!((st.lease_secs, st.renew_secs), (60, 20));
}

#[test]
fn station_errors_name_the_key() {
    let base = format!(
        "[station]\nenabled = true\ninterface = \"wlan0\"\nap = \"10.0.0.1\"\nkey = \"{K}\"\n"
    );
    let e = err(&base);
    assert!(e.contains("station.ports") && e.contains("required"), "{e}");
    let e = err(&format!("{base}ports = \"9-3\"\n"));
    assert!(
        e.contains("t.toml:6: key `station.ports`") && e.contains("empty"),
        "{e}"
    );
    let e = err(&format!("{base}ports = \"sometimes\"\n"));
    assert!(e.contains("station.ports") && e.contains("auto"), "{e}");
    let e = err(&format!("{base}ports = 5004\nrenew_secs = 60\n"));
    assert!(e.contains("station.renew_secs"), "{e}");
    let e = err(&format!("{base}ports = 5004\ngroup = \"ff02::1\"\n"));
    assert!(e.contains("station.group"), "{e}");
    let e = err(&format!(
        "[station]\nenabled = true\ninterface = \"wlan0\"\nkey = \"{K}\"\nports = 1\n"
    ));
    assert!(e.contains("station.ap") && e.contains("required"), "{e}");
    let e = err(&format!(
        "[station]\nenabled = true\nap = \"10.0.0.1\"\nkey = \"{K}\"\nports = 1\n"
    ));
    assert!(e.contains("station.interface"), "{e}");
    let e = err(&format!(
        "[station]\nenabled = true\ninterface = \"wlan0\"\nap = \"fd00::1\"\ngroup = \"ff05::10\"\nformat = \"seed\"\nkey = \"{K}\"\nports = 1\n"
    ));
    assert!(e.contains("station.format"), "{e}");
}

#[test]
fn ap_and_station_compose_with_aggregation() {
    let text = format!(
        "[daemon]\nmode = \"hop-by-hop\"\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"5000-5100\"\n[[peer]]\naddress = \"10.0.0.2\"\n\
         [ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\n\
         [station]\nenabled = true\ninterface = \"eth0\"\nap = \"10.9.0.1\"\nkey = \"{K}\"\nports = \"auto\"\n"
    );
    let p = parse("t.toml", &text, &[], &[]).unwrap();
    assert_eq!(p.peers.len(), 1);
    assert!(p.ap.is_some() && p.station.is_some());
}

#[test]
fn airtime_rule_needs_both_rates_of_802_11() {
    let base = format!("[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\n");
    let plan = |extra: &str| parse("t.toml", &format!("{base}{extra}"), &[], &[]);
    assert!(plan("").unwrap().ap.unwrap().mux.airtime.is_none());
    let ap = plan("unicast_rate = 11\nmulticast_rate = 5.5\npreamble = \"short\"\n")
        .unwrap()
        .ap
        .unwrap();
    let cell = ap.mux.airtime.expect("rule on");
    assert_eq!(cell.unicast.mbps, 11.0);
    assert_eq!(
        cell.multicast.modulation,
        airpack_core::downlink::airtime::Modulation::DsssShort
    );
    assert_eq!(ap.mux.frame_overhead, 28);
    let e = err(&format!("{base}unicast_rate = 11\n"));
    assert!(
        e.contains("ap.multicast_rate") && e.contains("required"),
        "{e}"
    );
    let e = err(&format!("{base}multicast_rate = 2\n"));
    assert!(e.contains("ap.unicast_rate"), "{e}");
    let e = err(&format!("{base}unicast_rate = 7\nmulticast_rate = 2\n"));
    assert!(
        e.contains("ap.unicast_rate") && e.contains("not an 802.11 rate"),
        "{e}"
    );
    let e = err(&format!("{base}preamble = \"medium\"\n"));
    assert!(e.contains("preamble"), "{e}");
}

#[test]
fn redundancy_is_compact_only() {
    let base = format!(
        "[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\nredundancy = true\n"
    );
    let p = parse("t.toml", &base, &[], &[]).unwrap();
    assert_eq!(p.ap.unwrap().mux.redundancy, 1, "true is depth 1");
    let e = err(&format!("{base}format = \"seed\"\n"));
    assert!(e.contains("ap.redundancy") && e.contains("compact"), "{e}");
    // a depth: the last D frames' packets
    let depth = |v: &str| {
        parse(
            "t.toml",
            &format!(
                "[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\nredundancy = {v}\n"
            ),
            &[],
            &[],
        )
        .map(|p| p.ap.unwrap().mux.redundancy)
    };
    assert_eq!(depth("false").unwrap(), 0);
    assert_eq!(depth("0").unwrap(), 0);
    assert_eq!(depth("3").unwrap(), 3);
    assert_eq!(depth("4").unwrap(), 4);
    let e = format!("{:#}", depth("5").unwrap_err());
    assert!(e.contains("ap.redundancy") && e.contains("0-4"), "{e}");
    assert!(depth("\"two\"").is_err());
    let p = parse(
        "t.toml",
        &format!("{base}redundancy_partial = true\n"),
        &[],
        &[],
    )
    .unwrap();
    assert!(p.ap.unwrap().mux.partial_repeat);
    let e = err(&format!(
        "[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\nredundancy_partial = true\n"
    ));
    assert!(e.contains("ap.redundancy_partial"), "{e}");
    assert!(depth("-1").is_err());
}

#[test]
fn loss_rule_defaults_and_limits() {
    let base = format!("[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\n");
    let ap = parse("t.toml", &base, &[], &[]).unwrap().ap.unwrap();
    assert!(ap.loss.enabled);
    assert_eq!(ap.loss.limit, 0.01);
    assert_eq!(ap.loss.clear, 0.005);
    assert_eq!(ap.loss.probe, 30_000_000);
    assert_eq!(ap.loss.max_probe, 240_000_000);
    assert_eq!(ap.loss.airtime_budget, LossConfig::default().airtime_budget);
    assert!(
        ap.loss.start_unicast && ap.loss.start_trial > 0,
        "new stations start on unicast, with a trial, by default"
    );
    let t = format!("{base}loss_start_unicast = false\n");
    assert!(
        !parse("t.toml", &t, &[], &[])
            .unwrap()
            .ap
            .unwrap()
            .loss
            .start_unicast
    );
    let t = format!("{base}loss_aware = false\nloss_limit_pct = 3\nloss_clear_pct = 1.5\nloss_probe_secs = 10\n");
    let ap = parse("t.toml", &t, &[], &[]).unwrap().ap.unwrap();
    assert!(!ap.loss.enabled);
    assert_eq!(
        (ap.loss.limit, ap.loss.clear, ap.loss.probe),
        (0.03, 0.015, 10_000_000)
    );
    let t = format!("{base}loss_keep = 0.9\nloss_min_frames = 200\n");
    let ap = parse("t.toml", &t, &[], &[]).unwrap().ap.unwrap();
    assert_eq!((ap.loss.keep, ap.loss.min_frames), (0.9, 200));
    let ap = parse("t.toml", &base, &[], &[]).unwrap().ap.unwrap();
    assert_eq!(
        (ap.loss.keep, ap.loss.min_frames),
        (0.5, 20),
        "the defaults"
    );
    for (k, v) in [
        ("loss_limit_pct", "0"),
        ("loss_limit_pct", "101"),
        ("loss_clear_pct", "1.0"),
        ("loss_clear_pct", "-1"),
        ("loss_probe_secs", "0"),
        ("loss_airtime_budget", "0"),
        ("loss_airtime_budget", "5"),
        ("loss_keep", "1.0"),
        ("loss_keep", "-0.1"),
        ("loss_min_frames", "0"),
    ] {
        let e = err(&format!("{base}{k} = {v}\n"));
        assert!(e.contains(&format!("ap.{k}")), "{k} = {v}: {e}");
    }
    let st = format!(
        "[station]\nenabled = true\ninterface = \"wlan0\"\nap = \"10.0.0.1\"\nkey = \"{K}\"\nports = 4000\n"
    );
    let s = parse("t.toml", &st, &[], &[]).unwrap().station.unwrap();
    assert_eq!(s.report_secs, 1);
    let s = parse("t.toml", &format!("{st}report_secs = 0\n"), &[], &[])
        .unwrap()
        .station
        .unwrap();
    assert_eq!(s.report_secs, 0);
}

#[test]
fn ap_frame_dscp_defaults_to_ef_and_is_checked() {
    let base = format!("[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\n");
    let ap = parse("t.toml", &base, &[], &[]).unwrap().ap.unwrap();
    assert_eq!(ap.frame_dscp, 46, "EF: a WMM AP's AC_VO");
    for v in [0u8, 34, 63] {
        let t = format!("{base}frame_dscp = {v}\n");
        assert_eq!(
            parse("t.toml", &t, &[], &[])
                .unwrap()
                .ap
                .unwrap()
                .frame_dscp,
            v
        );
    }
    let e = err(&format!("{base}frame_dscp = 64\n"));
    assert!(e.contains("ap.frame_dscp") && e.contains("0-63"), "{e}");
    let e = err(&format!("{base}frame_dscp = 300\n"));
    assert!(e.contains("frame_dscp"), "{e}");
}

#[test]
fn frame_copies_are_one_to_four_and_compact_only() {
    let base = format!("[ap]\nenabled = true\ninterfaces = [\"wlan0\"]\nkey = \"{K}\"\n");
    // the copies of `[ap]` = base + `extra`
    let copies_with = |extra: &str| {
        parse("t.toml", &format!("{base}{extra}"), &[], &[]).map(|p| p.ap.unwrap().mux.copies)
    };
    let copies = |v: &str| copies_with(&format!("frame_copies = {v}\n"));
    let rates = "unicast_rate = 11.0\nmulticast_rate = 2.0\n";
    assert_eq!(
        copies_with("").unwrap(),
        1,
        "unset without the airtime rule: one copy (nothing prices a copy)"
    );
    assert_eq!(
        copies_with(rates).unwrap(),
        2,
        "unset with the airtime rule: two copies in the compact layout"
    );
    assert_eq!(
        copies_with(&format!("{rates}format = \"seed\"\n")).unwrap(),
        1,
        "unset: one copy in the seed layout (no sequence number)"
    );
    assert_eq!(copies("1").unwrap(), 1);
    assert_eq!(copies("2").unwrap(), 2);
    assert_eq!(copies("4").unwrap(), 4);
    for bad in ["0", "5"] {
        let e = format!("{:#}", copies(bad).unwrap_err());
        assert!(e.contains("ap.frame_copies") && e.contains("1-4"), "{e}");
    }
    let e = err(&format!("{base}format = \"seed\"\nframe_copies = 2\n"));
    assert!(
        e.contains("ap.frame_copies") && e.contains("compact"),
        "{e}"
    );
}
