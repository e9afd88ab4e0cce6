//! Unit tests of the configuration: parsing, validation errors, overrides.

use super::*;

fn p(text: &str) -> anyhow::Result<Plan> {
    parse("test.toml", text, &[], &[])
}

fn err(text: &str) -> String {
    format!("{:#}", p(text).expect_err("should fail"))
}

#[test]
fn empty_file_gives_defaults() {
    let plan = p("").unwrap();
    // The defaults, with the effective link mode written in (`--check`).
    let mut want = Config::default();
    want.aggregation.link_mode = Some(LinkModeCfg::Adaptive);
    assert_eq!(plan.config, want);
    assert_eq!(plan.link_mode, LinkModeCfg::Adaptive);
    assert_eq!(plan.engine.peer_defaults.hold_time, 5000);
    assert!(
        !plan.engine.peer_defaults.accepts_bundles,
        "unconfigured peers must not get bundles"
    );
    assert!(plan.steer.is_empty());
    assert_eq!(plan.source_check, SourceCheck::Route);
}

#[test]
fn unknown_key_names_key_and_line() {
    let e =
        err("[daemon]\nmode = \"hop-by-hop\"\n\n[aggregation]\nhold_time_us = 5000\nhodl = 3\n");
    assert!(e.contains("test.toml:6"), "{e}");
    assert!(e.contains("hodl"), "{e}");
    assert!(e.contains("aggregation.hodl"), "{e}");
}

#[test]
fn unknown_section_names_line() {
    let e = err("[daemon]\ntun = \"x0\"\n[agregation]\nmin_size = 3\n");
    assert!(e.contains("test.toml:3"), "{e}");
    assert!(e.contains("agregation"), "{e}");
}

#[test]
fn unknown_key_in_peer_array() {
    let e = err(
        "[[peer]]\naddress = \"10.0.0.2\"\n\n[[peer]]\naddress = \"10.0.0.3\"\nallowed_ip = []\n",
    );
    assert!(e.contains("test.toml:6"), "{e}");
    assert!(e.contains("allowed_ip"), "{e}");
}

#[test]
fn bad_value_type_names_key_and_line() {
    let e = err("[aggregation]\n\nhold_time_us = \"soon\"\n");
    assert!(e.contains("test.toml:3"), "{e}");
    assert!(e.contains("aggregation.hold_time_us"), "{e}");
}

#[test]
fn bad_enum_value() {
    let e = err("[daemon]\nmode = \"sideways\"\n");
    assert!(
        e.contains("test.toml:2") && e.contains("daemon.mode"),
        "{e}"
    );
    assert!(e.contains("end-to-end"), "lists the choices: {e}");
    let e = err("[aggregation]\nencoding = \"zip\"\n");
    assert!(
        e.contains("test.toml:2") && e.contains("aggregation.encoding"),
        "{e}"
    );
}

#[test]
fn medium_keys_and_adaptive_mode() {
    let plan = p("[aggregation]\nlink_mode = \"adaptive\"\nhold_time_us = 10000\n[medium]\nfile = \"/dev/shm/x/A.air\"\nbusy_utilisation = 0.45\ndelay_budget_us = 30000\n").unwrap();
    assert_eq!(
        plan.engine.link_mode,
        LinkMode::Adaptive(airpack_core::engine::AdaptiveHold {
            delay_budget: 30_000,
            busy_utilisation: 450
        })
    );
    assert_eq!(plan.config.medium.file.as_deref(), Some("/dev/shm/x/A.air"));
    assert!(plan.config.medium.qdisc);
    let e = err("[medium]\nbusy_utilisation = 1.5\n");
    assert!(e.contains("medium.busy_utilisation"), "{e}");
    let e = err("[medium]\nqdisc_interval_us = 10\n");
    assert!(e.contains("medium.qdisc_interval_us"), "{e}");
    let e = err("[medium]\nsurvey = true\n");
    assert!(e.contains("survey"), "{e}");
    assert_eq!(plan.config.medium.survey, SurveyCfg::Auto);
    let off = p("[medium]\nsurvey = \"off\"\nsurvey_interval_us = 200000\n").unwrap();
    assert_eq!(
        (
            off.config.medium.survey,
            off.config.medium.survey_interval_us
        ),
        (SurveyCfg::Off, 200_000)
    );
    let e = err("[medium]\nsurvey = \"on\"\n");
    assert!(e.contains("survey"), "{e}");
    let e = err("[medium]\nsurvey_interval_us = 1000\n");
    assert!(e.contains("medium.survey_interval_us"), "{e}");
}

/// Issue 11 point 7: `adaptive` is the default link mode hop-by-hop; a
/// file without `link_mode` gets it (with `[medium]`'s parameters), while
/// end-to-end keeps the fixed hold; an explicit mode always wins.
#[test]
fn link_mode_default_is_adaptive_hop_by_hop() {
    let voice = "[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n[[peer]]\naddress = \"10.0.0.2\"\n";
    let adaptive_defaults = LinkMode::Adaptive(airpack_core::engine::AdaptiveHold::default());
    assert_eq!(AggregationSection::default().link_mode, None);

    // No link_mode, hop-by-hop (explicit or by default): adaptive.
    for head in [
        "",
        "[daemon]\nmode = \"hop-by-hop\"\n[aggregation]\nhold_time_us = 20000\n",
    ] {
        let plan = p(&format!("{head}{voice}")).unwrap();
        assert_eq!(plan.link_mode, LinkModeCfg::Adaptive, "{head}");
        assert_eq!(plan.engine.link_mode, adaptive_defaults, "{head}");
        assert_eq!(
            plan.config.aggregation.link_mode,
            Some(LinkModeCfg::Adaptive)
        );
    }
    // ... and takes [medium]'s parameters.
    let plan = p(&format!(
        "[medium]\nbusy_utilisation = 0.25\ndelay_budget_us = 50000\n{voice}"
    ))
    .unwrap();
    assert_eq!(
        plan.engine.link_mode,
        LinkMode::Adaptive(airpack_core::engine::AdaptiveHold {
            delay_budget: 50_000,
            busy_utilisation: 250
        })
    );
    // `--check` shows the effective mode, and its output reads back the same.
    let text = render(&plan.config);
    assert!(text.contains("link_mode = \"adaptive\""), "{text}");
    assert_eq!(p(&text).unwrap().config, plan.config);

    // End-to-end without link_mode: the fixed hold.
    let e2e = "[daemon]\nmode = \"end-to-end\"\n[[peer]]\naddress = \"10.0.9.1\"\nallowed_ips = [\"10.9.0.0/24\"]\n";
    let plan = p(e2e).unwrap();
    assert_eq!(plan.link_mode, LinkModeCfg::Fixed);
    assert_eq!(plan.engine.link_mode, LinkMode::Fixed);
    assert!(render(&plan.config).contains("link_mode = \"fixed\""));

    // Explicit modes win in both directions.
    let plan = p(&format!("[aggregation]\nlink_mode = \"fixed\"\n{voice}")).unwrap();
    assert_eq!(
        (plan.link_mode, plan.engine.link_mode),
        (LinkModeCfg::Fixed, LinkMode::Fixed)
    );
    let plan = p(&e2e.replace(
        "[[peer]]",
        "[aggregation]\nlink_mode = \"adaptive\"\n[[peer]]",
    ))
    .unwrap();
    assert_eq!(plan.engine.link_mode, adaptive_defaults);
    let plan = p(&format!(
        "[aggregation]\nlink_mode = \"hold-while-busy\"\n{voice}"
    ))
    .unwrap();
    assert_eq!(plan.engine.link_mode, LinkMode::HoldWhileBusy);
}

#[test]
fn discovery_keys() {
    let plan = p("").unwrap();
    assert!(!plan.config.discovery.enabled);
    let ok = "[daemon]\ninterfaces = [\"wlan0\"]\n[discovery]\nenabled = true\nkey = \"00112233445566778899aabbccddeeff\"\n";
    let plan = p(ok).unwrap();
    assert!(plan.config.discovery.enabled);
    let e = err("[discovery]\nenabled = true\n");
    assert!(
        e.contains("discovery.enabled") && e.contains("daemon.interfaces"),
        "{e}"
    );
    let e = err(
        "[daemon]\nmode = \"end-to-end\"\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\n",
    );
    assert!(e.contains("hop-by-hop"), "{e}");
    // A bad key is refused even while discovery is off.
    let e = err("[discovery]\nkey = \"0011\"\n");
    assert!(
        e.contains("test.toml:2") && e.contains("discovery.key"),
        "{e}"
    );
    let e = err(
        "[daemon]\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\ngroup_v4 = \"10.0.0.1\"\n",
    );
    assert!(e.contains("discovery.group_v4"), "{e}");
    let e = err("[daemon]\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\nmin_size = 2000\n");
    assert!(e.contains("discovery.min_size"), "{e}");
    let e = err("[daemon]\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\ninterval_ms = 10\n");
    assert!(e.contains("discovery.interval_ms"), "{e}");
}

#[test]
fn validation_errors_name_key_and_line() {
    let e = err("[aggregation]\nmax_size = 1500\nmin_size = 2000\n");
    assert!(
        e.contains("test.toml:3") && e.contains("aggregation.min_size"),
        "{e}"
    );
    let e = err("[daemon]\nfilter_priority = 3\nbypass_mark = 0\n");
    assert!(
        e.contains("test.toml:3") && e.contains("bypass_mark"),
        "{e}"
    );
    let e = err("[daemon]\nfilter_priority = 0\n");
    assert!(
        e.contains("daemon.filter_priority") && e.contains("1-65535"),
        "{e}"
    );
    let e = err("[daemon]\ninterfaces = [\"wlan0\", \"airpack0\"]\n");
    assert!(e.contains("daemon.interfaces") && e.contains("TUN"), "{e}");
    let e = err("[daemon]\ntun = \"a-very-long-interface-name\"\n");
    assert!(e.contains("daemon.tun"), "{e}");
    let e = err("[aggregation]\nprotocol = 17\n");
    assert!(e.contains("aggregation.protocol"), "{e}");
    let e = err("[aggregation]\nhold_time_us = 5000000\n");
    assert!(e.contains("hold_time_us"), "{e}");
}

#[test]
fn link_local_peer_addresses() {
    let plan =
        p("[[peer]]\naddress = \"fe80::2%wlan0\"\n[[peer]]\naddress = \"fd00::2\"\n").unwrap();
    assert_eq!(plan.peers[0].address, "fe80::2".parse::<IpAddr>().unwrap());
    assert_eq!(plan.peers[0].interface.as_deref(), Some("wlan0"));
    assert_eq!(plan.peers[1].interface, None);
    assert_eq!(plan.config.peers[0].address.to_string(), "fe80::2%wlan0");
    // Round trip through the serialized form.
    let back: PeerAddress = "fe80::2%wlan0".parse().unwrap();
    assert_eq!(back, plan.config.peers[0].address);
    let e = err("[[peer]]\naddress = \"fe80::2\"\n");
    assert!(
        e.contains("test.toml:2") && e.contains("peer.address") && e.contains("interface"),
        "{e}"
    );
    let e = err("[[peer]]\naddress = \"10.0.0.2%eth0\"\n");
    assert!(e.contains("link-local"), "{e}");
    let e = err("[[peer]]\naddress = \"fe80::2%\"\n");
    assert!(e.contains("interface name"), "{e}");
    let e = err("[[peer]]\naddress = \"fe80::2%a-very-long-interface\"\n");
    assert!(e.contains("interface name"), "{e}");
    // The engine keys peers by address: one link-local address on two
    // interfaces is refused.
    let e = err("[[peer]]\naddress = \"fe80::2%a0\"\n[[peer]]\naddress = \"fe80::2%b0\"\n");
    assert!(e.contains("twice"), "{e}");
}

#[test]
fn peer_errors() {
    let e = err("[[peer]]\naddress = \"10.0.0.300\"\n");
    assert!(
        e.contains("test.toml:2") && e.contains("peer.address"),
        "{e}"
    );
    let e = err("[[peer]]\naddress = \"10.0.0.2\"\n[[peer]]\naddress = \"10.0.0.2\"\n");
    assert!(
        e.contains("test.toml:4") && e.contains("peer[1].address") && e.contains("twice"),
        "{e}"
    );
    let e = err("[[peer]]\naddress = \"10.0.0.2\"\nallowed_ips = [\"10.1.0.1/24\"]\n");
    assert!(e.contains("test.toml:3") && e.contains("host bits"), "{e}");
    let e = err("[[peer]]\naddress = \"10.0.0.2\"\nallowed_ips = [\"10.1.0.0/33\"]\n");
    assert!(e.contains("allowed_ips") && e.contains("33"), "{e}");
    let e = err("[daemon]\nmode = \"end-to-end\"\n[[peer]]\naddress = \"10.0.0.2\"\n");
    assert!(e.contains("allowed_ips") && e.contains("end-to-end"), "{e}");
    let e = err("[[peer]]\naddress = \"10.0.0.2\"\nmax_size = 40\n");
    assert!(e.contains("peer[0].max_size"), "{e}");
    let e = err("[[peer]]\naddress = \"224.0.0.1\"\n");
    assert!(e.contains("multicast"), "{e}");
}

#[test]
fn class_errors() {
    let e = err("[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"32000-16000\"\n");
    assert!(
        e.contains("test.toml:4") && e.contains("class[0].ports") && e.contains("empty"),
        "{e}"
    );
    let e = err("[[class]]\nclass = \"bundle\"\nports = \"5060\"\n");
    assert!(
        e.contains("class[0].ports") && e.contains("protocol"),
        "{e}"
    );
    let e = err("[[class]]\nclass = \"bundle\"\ndscp = \"70\"\n");
    assert!(e.contains("class[0].dscp") && e.contains("63"), "{e}");
    let e = err("[[class]]\nclass = \"bundle\"\nprotocol = \"gre\"\n");
    assert!(e.contains("class[0].protocol"), "{e}");
    let e = err("[[class]]\nclass = \"sometimes\"\n");
    assert!(
        e.contains("test.toml:2") && e.contains("class.class"),
        "{e}"
    );
    let e = err("[[class]]\nclass = \"bundle\"\nmark = \"0x11/0x10\"\n");
    assert!(e.contains("class[0].mark"), "{e}");
    // Well-formed, but the TUN does not carry the mark: refused, with the reason.
    let e = err("[[class]]\nclass = \"bundle\"\nmark = \"0x10/0xff\"\n");
    assert!(e.contains("class[0].mark") && e.contains("TUN"), "{e}");
    let e = err("[aggregation]\ndynamic_marking = true\n");
    assert!(e.contains("dynamic_marking") && e.contains("TUN"), "{e}");
}

#[test]
fn converts_to_engine_config() {
    let plan = p(r#"
[daemon]
mode = "hop-by-hop"
transport = "udp"
filter_priority = 0x10
bypass_mark = 0x11
cpu_latency_us = 0
[aggregation]
encoding = "simplemux"
hold_time_us = 2000
link_mode = "hold-while-busy"
min_size = 1000
max_size = 1200
max_packets = 32
queue_limit_bytes = 10000
queue_limit_packets = 100
max_peers = 8
[[class]]
class = "bypass"
protocol = "udp"
dst_ports = 5353
[[class]]
class = "bundle"
protocol = "udp"
ports = "16000-32000"
dscp = "46"
len = "0-300"
version = 4
[[class]]
class = "opportunistic"
protocol = "tcp"
[[peer]]
address = "10.0.0.2"
hold_time_us = 1000
[[peer]]
address = "fd00::2"
encoding = "native"
"#)
    .unwrap();
    let e = &plan.engine;
    assert_eq!(e.link_mode, LinkMode::HoldWhileBusy);
    assert_eq!(e.max_peers, 8);
    assert_eq!(e.peer_defaults.encoding, Encoding::Simplemux);
    assert_eq!(e.peer_defaults.hold_time, 2000);
    assert_eq!(e.peer_defaults.min_size, 1000);
    assert_eq!(e.peer_defaults.max_size, 1200);
    assert_eq!(e.peer_defaults.max_packets, 32);
    assert_eq!(e.peer_defaults.queue_limit_bytes, 10000);
    assert_eq!(e.peer_defaults.queue_limit_packets, 100);
    assert!(!e.peer_defaults.accepts_bundles);
    assert_eq!(e.classifier.rules.len(), 3);
    let r = &e.classifier.rules[1];
    assert_eq!(r.class, TrafficClass::Bundle);
    assert_eq!(r.protocol, Some(17));
    assert_eq!(r.ports, Some(16000..=32000));
    assert_eq!(r.dscp, Some(46..=46));
    assert_eq!(r.len, Some(0..=300));
    assert_eq!(r.version, Some(4));
    assert_eq!(r.mark, None);
    assert_eq!(e.classifier.rules[0].dst_ports, Some(5353..=5353));
    assert_eq!(e.classifier.rules[2].class, TrafficClass::Opportunistic);
    // Steering keeps every rule in order; bypass rules stop the chain.
    assert_eq!(plan.steer.len(), 3);
    assert!(!plan.steer[0].steer);
    assert_eq!(plan.steer[0].dst_ports, Some((5353, 5353)));
    assert!(plan.steer[1].steer);
    assert_eq!(plan.steer[1].ports, Some((16000, 32000)));
    assert_eq!(plan.steer[1].mark, None);
    let spec = plan.steer_spec();
    assert_eq!((spec.bypass_mark, spec.priority), (0x11, 0x10));
    assert_eq!(plan.config.daemon.cpu_latency_us, Some(0));
    assert!(
        spec.interfaces.is_empty(),
        "none configured: the daemon finds them"
    );
    assert!(
        spec.steer_from_tun,
        "hop-by-hop re-aggregates forwarded packets"
    );
    // Peers: overrides and transport overhead per family.
    assert_eq!(plan.peers.len(), 2);
    let p0 = &plan.peers[0].config;
    assert!(p0.accepts_bundles);
    assert_eq!(p0.hold_time, 1000);
    assert_eq!(p0.encoding, Encoding::Simplemux);
    assert_eq!(p0.outer_overhead, 28, "UDP over IPv4");
    let p1 = &plan.peers[1].config;
    assert_eq!(p1.encoding, Encoding::Native);
    assert_eq!(p1.hold_time, 2000);
    assert_eq!(p1.outer_overhead, 48, "UDP over IPv6");
}

#[test]
fn end_to_end_allowed_ips_lpm() {
    let plan = p(r#"
[daemon]
mode = "end-to-end"
[[peer]]
address = "10.0.0.2"
allowed_ips = ["10.1.0.0/16"]
[[peer]]
address = "10.0.0.3"
allowed_ips = ["10.1.2.0/24", "fd00:1::/64"]
"#)
    .unwrap();
    let t = &plan.allowed_ips;
    assert_eq!(
        t.lookup("10.1.2.9".parse().unwrap()),
        Some("10.0.0.3".parse().unwrap())
    );
    assert_eq!(
        t.lookup("10.1.3.9".parse().unwrap()),
        Some("10.0.0.2".parse().unwrap())
    );
    assert_eq!(t.lookup("10.2.0.1".parse().unwrap()), None);
    assert_eq!(
        t.lookup("fd00:1::5".parse().unwrap()),
        Some("10.0.0.3".parse().unwrap())
    );
    assert_eq!(t.lookup("fd00:2::5".parse().unwrap()), None);
    assert_eq!(plan.source_check, SourceCheck::AllowedIps);
}

#[test]
fn cidr() {
    let c = Cidr::parse("0.0.0.0/0").unwrap();
    assert!(c.contains("1.2.3.4".parse().unwrap()));
    assert!(!c.contains("::1".parse().unwrap()));
    let c = Cidr::parse("10.0.0.7").unwrap();
    assert_eq!(c.prefix, 32);
    assert!(c.contains("10.0.0.7".parse().unwrap()));
    assert!(!c.contains("10.0.0.8".parse().unwrap()));
    assert!(Cidr::parse("::/0")
        .unwrap()
        .contains("fd00::1".parse().unwrap()));
    assert!(Cidr::parse("fd00::1/64").is_err());
    assert!(Cidr::parse("x/3").is_err());
}

#[test]
fn overrides() {
    let text = "[aggregation]\nhold_time_us = 5000\n";
    let sets = vec![
        "aggregation.hold_time_us=2500".to_owned(),
        "daemon.mode=end-to-end".to_owned(),
        "daemon.interfaces=[\"veth0\",\"veth1\"]".to_owned(),
        "daemon.bypass_mark=0x99".to_owned(),
        "peer.0.hold_time_us=100".to_owned(),
    ];
    let peers = vec!["10.0.0.9=10.9.0.0/24,fd00:9::/64".to_owned()];
    // peer.0 created by --set, then --peer appends peer 1. Peer 0 lacks an address.
    let e = parse("t.toml", text, &sets, &peers).unwrap_err();
    assert!(format!("{e:#}").contains("address"), "{e:#}");
    let sets = &sets[..4];
    let plan = parse("t.toml", text, sets, &peers).unwrap();
    assert_eq!(plan.engine.peer_defaults.hold_time, 2500);
    assert_eq!(plan.config.daemon.mode, Mode::EndToEnd);
    assert_eq!(plan.config.daemon.interfaces, vec!["veth0", "veth1"]);
    assert_eq!(plan.config.daemon.bypass_mark, 0x99);
    assert_eq!(plan.peers[0].address, "10.0.0.9".parse::<IpAddr>().unwrap());
    assert_eq!(plan.peers[0].allowed_ips.len(), 2);
    // A bad override is an error that names the flag.
    let e = parse(
        "t.toml",
        text,
        &["aggregation.hold_time_us=soon".into()],
        &[],
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("override"), "{e:#}");
    let e = parse("t.toml", text, &["aggregation.nope=1".into()], &[]).unwrap_err();
    assert!(format!("{e:#}").contains("nope"), "{e:#}");
    assert!(apply_override(&mut toml::Table::new(), "novalue").is_err());
}

#[test]
fn known_keys_cover_the_schema() {
    let keys = known_keys();
    for k in [
        "daemon.mode",
        "daemon.prometheus",
        "daemon.source_check",
        "aggregation.hold_time_us",
        "class.mark",
        "peer.allowed_ips",
        "peer.queue_limit_packets",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
    }
    // Every known key is accepted by the parser (no key listed that the schema rejects).
    assert!(!keys
        .iter()
        .any(|k| k.ends_with(".classes") || k.ends_with(".peers")));
}

#[test]
fn render_roundtrips() {
    let plan = p("[daemon]\nprometheus = \"127.0.0.1:9000\"\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"1-2\"\n[[peer]]\naddress = \"10.0.0.2\"\n").unwrap();
    let text = render(&plan.config);
    let again = p(&text).unwrap();
    assert_eq!(again.config, plan.config);
}
