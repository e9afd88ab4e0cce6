//! The shipped example configs (examples/*.toml) aggregate the project's own
//! voice traffic (issue 9, point 8): each runs in two namespaces, adapted
//! only where a test must (interface names, peer addresses), with real
//! `airpack voip` calls between them, and must bundle (an aggregation
//! ratio above 1). `airpack voip --dscp 0` against the end-to-end example, whose class
//! selects DSCP 46, shows the "nothing matched" note of `airpack stats`.
//!
//! Owns: these example checks. Must not touch: the examples' semantics (only
//! the substitutions listed in each test).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn example(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The example with `control_socket` removed (the harness passes its own)
/// and the given text substitutions applied (each must apply).
fn adapt(text: &str, subs: &[(&str, &str)]) -> String {
    let mut t: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("control_socket"))
        .map(|l| format!("{l}\n"))
        .collect();
    for (from, to) in subs {
        assert!(t.contains(from), "{from:?} not in the example");
        t = t.replace(from, to);
    }
    t
}

/// `calls` G.729 calls between `a` (node A, in namespace `ns_a`) and `b`,
/// run by `airpack voip` processes in the namespaces; returns the merged
/// summary JSON.
fn voip(
    net: &Net,
    tag: &str,
    (ns_a, a): (&str, &str),
    (ns_b, b): (&str, &str),
    calls: u16,
    dscp: u8,
) -> serde_json::Value {
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 1500;
    let calls: Vec<_> = (0..calls)
        .map(|i| {
            serde_json::json!({"id": i, "a": {"node": "A", "addr": a, "port": 16000 + 2 * i},
                               "b": {"node": "B", "addr": b, "port": 16000 + 2 * i}})
        })
        .collect();
    let spec = net.dir.join(format!("{tag}-spec.json"));
    let spec_json = serde_json::json!({"codec": "g729", "interval_ms": 20, "duration_s": 3.0,
        "start_at_unix_ms": start, "grace_ms": 1500, "calls": calls});
    std::fs::write(&spec, spec_json.to_string()).unwrap();
    let out = |n: &str| net.dir.join(format!("{tag}-{n}.json"));
    let dscp = dscp.to_string();
    let spawn = |ns: &str, node: &str, out: &PathBuf| {
        Command::new("ip")
            .args([
                "netns", "exec", ns, BIN, "voip", "--dscp", &dscp, "--node", node, "--spec",
            ])
            .arg(&spec)
            .arg("--out")
            .arg(out)
            .output()
            .expect("spawn airpack voip")
    };
    let (out_a, out_b) = (out("A"), out("B"));
    let (ra, rb) = std::thread::scope(|s| {
        let ha = s.spawn(|| spawn(ns_a, "A", &out_a));
        let hb = s.spawn(|| spawn(ns_b, "B", &out_b));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    for r in [&ra, &rb] {
        assert!(
            r.status.success(),
            "airpack voip: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    let merged = Command::new(BIN)
        .args(["voip", "--spec"])
        .arg(&spec)
        .arg("--merge")
        .arg(&out_a)
        .arg(&out_b)
        .output()
        .unwrap();
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    serde_json::from_slice(&merged.stdout).unwrap()
}

#[test]
fn end_to_end_example_bundles_airpack_voip_and_explains_unmarked_traffic() {
    if !can_run("end_to_end_example_bundles_airpack_voip_and_explains_unmarked_traffic") {
        return;
    }
    // A: gateway 10.0.0.1 serving 10.1.0.0/24 (as in the example); B: the far
    // gateway 10.0.9.1 serving 10.9.0.0/24, one veth apart (a mesh router in
    // between would only forward). Each gateway's mesh address is the one
    // the other names as its peer, so bundles come from the expected source.
    let mut net = Net::new("exe2e");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", "10.0.0.1/24", &b, "vb", "10.0.9.1/24");
    net.ip(&a, &["addr", "add", "10.1.0.1/24", "dev", "lo"]);
    net.ip(&b, &["addr", "add", "10.9.0.1/24", "dev", "lo"]);
    net.ip(&a, &["route", "add", "10.0.9.1/32", "dev", "va"]);
    net.ip(
        &a,
        &[
            "route",
            "add",
            "10.9.0.0/24",
            "via",
            "10.0.9.1",
            "dev",
            "va",
        ],
    );
    net.ip(&b, &["route", "add", "10.0.0.1/32", "dev", "vb"]);
    net.ip(
        &b,
        &[
            "route",
            "add",
            "10.1.0.0/24",
            "via",
            "10.0.0.1",
            "dev",
            "vb",
        ],
    );
    let text = example("end-to-end.toml");
    let cfg_a = adapt(&text, &[("\"wlan0\"", "\"va\"")]);
    let cfg_b = adapt(
        &text,
        &[
            ("\"wlan0\"", "\"vb\""),
            ("address = \"10.0.9.1\"", "address = \"10.0.0.1\""),
            (
                "[\"10.9.0.0/24\", \"10.0.9.1/32\"]",
                "[\"10.1.0.0/24\", \"10.0.0.1/32\"]",
            ),
        ],
    );
    let da = net.daemon(&a, &cfg_a, &[]);
    let db = net.daemon(&b, &cfg_b, &[]);

    // Unmarked voice (DSCP 0) does not match the example's `dscp = "46"`:
    // `airpack stats` says so instead of a bare ratio of 1.
    let unmarked = voip(&net, "dscp0", (&a, "10.1.0.1"), (&b, "10.9.0.1"), 2, 0);
    assert!(unmarked["summary"]["supported_calls"] == 2, "{unmarked}");
    assert_eq!(da.stat("/total/packets_in"), 0.0);
    let text = da.cli(&["stats"]);
    assert!(text.contains("note: nothing matched"), "{text}");
    let note = da.stats()["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.starts_with("note: nothing matched"), "{note}");

    // airpack voip's default marking (EF) matches: both ends bundle.
    let calls = 4;
    let r = voip(&net, "ef", (&a, "10.1.0.1"), (&b, "10.9.0.1"), calls, 46);
    let s = &r["summary"];
    assert_eq!(s["supported_calls"], calls, "{r}");
    assert_eq!(s["loss_max_pct"].as_f64(), Some(0.0), "{s}");
    for (name, d) in [("A", &da), ("B", &db)] {
        let t = d.stats()["total"].clone();
        let ratio = t["aggregation_ratio"].as_f64().unwrap();
        println!("end-to-end example, {name}: ratio {ratio:.2}: {t}");
        assert!(ratio > 1.0, "{name} did not bundle airpack voip: {t}");
        assert!(
            !d.cli(&["stats"]).contains("note:"),
            "{name}: a note while bundling"
        );
        assert!(
            d.stats()["note"].is_null(),
            "{name}: a JSON note while bundling"
        );
    }
}

#[test]
fn hop_by_hop_example_bundles_airpack_voip_on_a_busy_link() {
    if !can_run("hop_by_hop_example_bundles_airpack_voip_on_a_busy_link") {
        return;
    }
    // Node 10.0.0.1 and its neighbour 10.0.0.2 (both in the example's peer list).
    let mut net = Net::new("exhbh");
    let a = net.ns("a");
    let b = net.ns("b");
    net.link(&a, "va", "10.0.0.1/24", &b, "vb", "10.0.0.2/24");
    // The example's link mode (adaptive) bundles only while the link is busy
    // and several flows share the next hop: A's link gets a 300 kbit/s
    // bottleneck, and 12 calls send 12 x 50 packets/s x 74 bytes (with the
    // Ethernet header) = 355 kbit/s into it, so its qdisc backs up.
    net.exec(
        &a,
        &[
            "tc", "qdisc", "add", "dev", "va", "root", "tbf", "rate", "300kbit", "burst", "1600",
            "limit", "100000",
        ],
    );
    let text = example("hop-by-hop.toml");
    let common_subs = [("\"wlan0\"", "\"va\""), ("%wlan0", "%va")];
    let cfg_a = adapt(&text, &common_subs);
    let cfg_b = adapt(
        &text,
        &[
            ("\"wlan0\"", "\"vb\""),
            ("%wlan0", "%vb"),
            ("address = \"10.0.0.2\"", "address = \"10.0.0.1\""),
        ],
    );
    let da = net.daemon(&a, &cfg_a, &[]);
    let _db = net.daemon(&b, &cfg_b, &[]);
    let r = voip(&net, "hbh", (&a, "10.0.0.1"), (&b, "10.0.0.2"), 12, 46);
    let t = da.stats()["total"].clone();
    let ratio = t["aggregation_ratio"].as_f64().unwrap();
    println!(
        "hop-by-hop example: A ratio {ratio:.2}, summary {}",
        r["summary"]
    );
    assert!(t["daemon"]["busy_transitions"].as_u64().unwrap() > 0, "{t}");
    assert!(
        ratio > 1.0,
        "A did not bundle airpack voip on a busy link: {t}"
    );
    assert!(r["summary"]["calls"] == 12, "{r}");
}
