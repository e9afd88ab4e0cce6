//! Tests of the HTB scripts and the `tc` output parser.

use super::*;

fn layout() -> Layout {
    Layout {
        dev: "mesh0".into(),
        link_bps: 100_000_000,
        queue_packets: 32,
        voice_bytecode: "1,6 0 0 4294967295".into(),
        tcp_bytecode: "1,6 0 0 4294967295".into(),
    }
}

fn flow(n: u8) -> FlowMatch {
    FlowMatch {
        src: IpAddr::from([10, 0, 0, 1]),
        dst: IpAddr::from([10, 0, 1, n]),
        sport: 5001,
        dport: 40_000 + u16::from(n),
    }
}

#[test]
fn setup_has_every_class_and_both_filters() {
    let s = setup_script(&layout(), 2_000_000);
    for want in [
        "qdisc replace dev mesh0 root handle 1a0: htb default 30",
        "classid 1a0:10 htb rate 100000000bit",
        "classid 1a0:20 htb rate 2000000bit ceil 2000000bit burst 1600 cburst 1600 prio 1",
        "classid 1a0:21 htb rate 2000000bit",
        "parent 1a0:21 handle 21: pfifo limit 32",
        "prio 1 protocol all bpf bytecode \"1,6 0 0 4294967295\" classid 1a0:10",
        "prio 9000 protocol all bpf bytecode",
    ] {
        assert!(s.contains(want), "{want} missing in\n{s}");
    }
    assert_eq!(
        teardown_script("mesh0"),
        "qdisc del dev mesh0 root handle 1a0:\n"
    );
}

#[test]
fn updates_are_minimal_diffs() {
    let l = layout();
    let mut a = Applied::after_setup(2_000_000);
    let same = Desired {
        rate_bps: 2_000_000,
        share_bps: 2_000_000,
        flows: vec![],
    };
    assert_eq!(a.update_script(&l, &same), "", "nothing changed");
    let two = Desired {
        rate_bps: 2_100_000,
        share_bps: 1_050_000,
        flows: vec![(0, flow(1)), (3, flow(2))],
    };
    let s = a.update_script(&l, &two);
    assert!(
        s.contains("class change dev mesh0 parent 1a0:1 classid 1a0:20 htb rate 2100000bit"),
        "{s}"
    );
    assert!(s.contains("classid 1a0:21 htb rate 1050000bit"), "{s}");
    assert!(
        s.contains("class add dev mesh0 parent 1a0:20 classid 1a0:100 htb rate 1050000bit"),
        "{s}"
    );
    assert!(s.contains("classid 1a0:103 htb rate 1050000bit"), "{s}");
    assert!(s.contains("prio 103 protocol ip u32 match ip protocol 6 0xff match ip src 10.0.0.1/32 match ip dst 10.0.1.2/32 match ip sport 5001 0xffff match ip dport 40002 0xffff classid 1a0:103"), "{s}");
    assert!(!s.contains(" del "), "{s}");
    assert_eq!(a.update_script(&l, &two), "", "applied");
    // Slot 0 ends, slot 3 stays: one filter and class go, the share changes for the rest.
    let one = Desired {
        rate_bps: 2_100_000,
        share_bps: 2_100_000,
        flows: vec![(3, flow(2))],
    };
    let s = a.update_script(&l, &one);
    assert!(
        s.starts_with(
            "filter del dev mesh0 parent 1a0: prio 100\nclass del dev mesh0 classid 1a0:100\n"
        ),
        "{s}"
    );
    assert!(
        s.contains("class change dev mesh0 parent 1a0:20 classid 1a0:103 htb rate 2100000bit"),
        "{s}"
    );
    assert!(!s.contains("class add"), "{s}");
    // A slot reused by another flow: removed and added again.
    let reused = Desired {
        flows: vec![(3, flow(9))],
        ..one.clone()
    };
    let s = a.update_script(&l, &reused);
    assert!(
        s.contains("prio 103\n") && s.contains("class add") && s.contains("10.0.1.9/32"),
        "{s}"
    );
    // IPv6 flows use the ip6 matches.
    let v6 = FlowMatch {
        src: "fd00::1".parse().unwrap(),
        dst: "fd00::2".parse().unwrap(),
        sport: 1,
        dport: 2,
    };
    let s = a.update_script(
        &l,
        &Desired {
            flows: vec![(3, flow(9)), (5, v6)],
            ..one
        },
    );
    assert!(
        s.contains(
            "prio 105 protocol ipv6 u32 match ip6 protocol 6 0xff match ip6 src fd00::1/128"
        ),
        "{s}"
    );
    // High rates get a 1 ms burst.
    let mut s = String::new();
    htb_class(&mut s, "add", "x", 1, 2, 80_000_000, 1);
    assert!(s.contains("burst 10000 cburst 10000"), "{s}");
}

#[test]
fn parses_tc_class_output() {
    let text = "class htb 1a0:103 parent 1a0:20 leaf 103: prio 1 rate 1050Kbit ceil 1050Kbit burst 1599b cburst 1599b \n Sent 123456 bytes 99 pkt (dropped 7, overlimits 3 requeues 0) \n backlog 3028b 2p requeues 0\n lended: 0 borrowed: 0 giants: 0\n tokens: 1 ctokens: 1\n\nclass htb 1a0:20 parent 1a0:1 rate 67200bit ceil 67200bit burst 1600b cburst 1600b \n Sent 5 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\nclass htb 1:5 root rate 1Gbit\n Sent 9 bytes 9 pkt (dropped 9, overlimits 0 requeues 0)\n";
    let c = parse_class_stats(text);
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(
        c[&0x103],
        ClassStats {
            rate_bps: 1_050_000,
            bytes: 123_456,
            packets: 99,
            dropped: 7,
            backlog_packets: 2
        }
    );
    assert_eq!(c[&0x20].rate_bps, 67_200);
    assert_eq!(parse_rate("1.5Mbit"), Some(1_500_000));
    assert_eq!(parse_rate("1Gbit"), Some(1_000_000_000));
    assert_eq!(parse_rate("12"), None);
    assert_eq!(parse_rate("xMbit"), None);
}
