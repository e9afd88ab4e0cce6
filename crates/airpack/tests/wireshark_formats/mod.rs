//! The dissector's other formats (dist/wireshark/airpack/*.lua, loaded by
//! airpack.lua): neighbour hellos, downlink frames (seed and compact
//! layouts) and downlink registration messages, on the golden pcaps
//! dist/wireshark/pcaps/{hello,downlink}/ made from the vectors in
//! crates/core/tests/vectors/{hello,downlink}/. The decoded fields are
//! checked against what each vector documents (its `key: value` lines and
//! its original packets) and against the core's own decoders; truncated and
//! corrupted messages give the decoder's error reason and never a Lua error.

mod robust;

use super::{have, repo, write_pcap};
use airpack_core::downlink::{compact, register, seed};
use airpack_core::neighbor::hello::Hello;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A vector file: its `key: value` lines (repeatable) and its hex sections.
struct Vector {
    name: String,
    keys: Vec<(String, String)>,
    sections: Vec<(String, Vec<u8>)>,
}

impl Vector {
    fn get(&self, k: &str) -> Option<&str> {
        self.keys
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
    }
    fn all(&self, k: &str) -> Vec<&str> {
        self.keys
            .iter()
            .filter(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    fn section(&self, k: &str) -> Vec<&[u8]> {
        self.sections
            .iter()
            .filter(|(a, _)| a == k)
            .map(|(_, v)| v.as_slice())
            .collect()
    }
}

fn parse(path: &Path) -> Vector {
    let mut v = Vector {
        name: path.file_stem().unwrap().to_string_lossy().into_owned(),
        keys: Vec::new(),
        sections: Vec::new(),
    };
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if let Some(k) = line.strip_suffix(':').filter(|k| !k.contains(' ')) {
            v.sections.push((k.to_owned(), Vec::new()));
        } else if let Some((k, val)) = line.split_once(": ") {
            v.keys.push((k.to_owned(), val.trim().to_owned()));
        } else {
            let s = &mut v.sections.last_mut().unwrap().1;
            s.extend(
                line.split_whitespace()
                    .map(|b| u8::from_str_radix(b, 16).unwrap()),
            );
        }
    }
    v
}

fn vectors(sub: &str) -> Vec<Vector> {
    let dir = repo().join("crates/core/tests/vectors").join(sub);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 8, "vectors in {dir:?}");
    paths.iter().map(|p| parse(p)).collect()
}

/// tshark with the dissector (and `opts`) on `pcap`: per frame, the values
/// of each of `fields`. Fails on any Lua error.
fn tshark(pcap: &Path, opts: &[&str], fields: &[&str]) -> Vec<HashMap<String, Vec<String>>> {
    let lua = repo().join("dist/wireshark/airpack.lua");
    let mut cmd = Command::new("tshark");
    cmd.arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", lua.display()));
    for o in opts {
        cmd.args(["-o", o]);
    }
    cmd.arg("-r").arg(pcap);
    cmd.args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {err}");
    assert!(!err.contains("Lua"), "Lua error: {err}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            fields
                .iter()
                .zip(l.split('\t'))
                .map(|(f, c)| {
                    let vals = c.split(';').filter(|x| !x.is_empty()).map(str::to_owned);
                    (f.to_string(), vals.collect())
                })
                .collect()
        })
        .collect()
}

fn pcap_of(sub: &str, name: &str) -> PathBuf {
    let p = repo()
        .join("dist/wireshark/pcaps")
        .join(sub)
        .join(format!("{name}.pcap"));
    assert!(
        p.exists(),
        "{p:?} missing: run dist/wireshark/make_pcaps.py"
    );
    p
}

fn strs<T: ToString>(it: impl IntoIterator<Item = T>) -> Vec<String> {
    it.into_iter().map(|x| x.to_string()).collect()
}

const HELLO_FIELDS: &[&str] = &[
    "airpack_hello.error",
    "airpack_hello.sender",
    "airpack_hello.seq",
    "airpack_hello.interval",
    "airpack_hello.encodings",
    "airpack_hello.neighbor",
    "airpack_hello.addr",
    "airpack_hello.addr6",
    "airpack_hello.rx_ratio",
    "airpack_hello.max_bundle",
    "airpack_hello.signal",
    "airpack_hello.noise",
    "airpack_hello.key_id",
    "ip.dst",
    "ipv6.dst",
];

#[test]
fn hello_pcaps_decode_as_the_vectors_say() {
    if !have("tshark") {
        println!("SKIP hello_pcaps_decode_as_the_vectors_say: tshark not installed");
        return;
    }
    let mut checked = 0;
    for v in vectors("hello") {
        let bytes = v.section("hello")[0];
        let core = Hello::parse(bytes);
        let rows = tshark(&pcap_of("hello", &v.name), &[], HELLO_FIELDS);
        assert_eq!(rows.len(), 2, "{}: IPv4 and IPv6 frames", v.name);
        assert_eq!(rows[0]["ip.dst"], ["224.0.0.151"]);
        assert_eq!(rows[1]["ipv6.dst"], ["ff02::151"]);
        for r in &rows {
            let ctx = format!("{}: {r:?}", v.name);
            // The vector's error, which is also the core decoder's.
            let want = v.get("error").map(str::to_owned);
            assert_eq!(
                want,
                core.as_ref().err().map(|e| e.reason().to_owned()),
                "{ctx}"
            );
            assert_eq!(r["airpack_hello.error"], strs(want.iter()), "{ctx}");
            let Some(sender) = v.get("sender") else {
                assert!(
                    want.is_some(),
                    "{ctx}: a vector without fields is an error vector"
                );
                continue;
            };
            assert_eq!(r["airpack_hello.sender"], [format!("0x{sender}")], "{ctx}");
            assert_eq!(r["airpack_hello.seq"], [v.get("seq").unwrap()], "{ctx}");
            assert_eq!(
                r["airpack_hello.interval"],
                [v.get("interval_ms").unwrap()],
                "{ctx}"
            );
            assert_eq!(
                r["airpack_hello.encodings"],
                [format!("0x{}", v.get("encodings").unwrap())],
                "{ctx}"
            );
            // entry: ID ADDR RATIO MAX SIGNAL/NOISE|-
            let entries: Vec<Vec<&str>> = v
                .all("entry")
                .iter()
                .map(|e| e.split_whitespace().collect())
                .collect();
            let ids: Vec<String> = entries.iter().map(|e| format!("0x{}", e[0])).collect();
            assert_eq!(r["airpack_hello.neighbor"], ids, "{ctx}");
            let addrs: Vec<IpAddr> = entries.iter().map(|e| e[1].parse().unwrap()).collect();
            let v4 = strs(addrs.iter().filter(|a| a.is_ipv4()));
            let v6 = strs(addrs.iter().filter(|a| a.is_ipv6()));
            assert_eq!(r["airpack_hello.addr"], v4, "{ctx}");
            assert_eq!(r["airpack_hello.addr6"], v6, "{ctx}");
            assert_eq!(
                r["airpack_hello.rx_ratio"],
                strs(entries.iter().map(|e| e[2])),
                "{ctx}"
            );
            assert_eq!(
                r["airpack_hello.max_bundle"],
                strs(entries.iter().map(|e| e[3])),
                "{ctx}"
            );
            let radio: Vec<(&str, &str)> = entries
                .iter()
                .filter_map(|e| e[4].split_once('/'))
                .collect();
            assert_eq!(
                r["airpack_hello.signal"],
                strs(radio.iter().map(|x| x.0)),
                "{ctx}"
            );
            assert_eq!(
                r["airpack_hello.noise"],
                strs(radio.iter().map(|x| x.1)),
                "{ctx}"
            );
            assert_eq!(r["airpack_hello.key_id"], strs(v.get("key_id")), "{ctx}");
            // And the core reads the same number of neighbours.
            assert_eq!(core.as_ref().unwrap().len(), entries.len(), "{ctx}");
            checked += 1;
        }
    }
    // 5 vectors with fields (ipv4, empty, auth, bad_tag, ...) x 2 frames.
    assert!(checked >= 8, "only {checked} hello frames checked");
}

/// An IPv4 packet's (src, dst, sport, dport, RTP sequence number).
fn ipv4_udp(p: &[u8]) -> (String, String, u16, u16, u16) {
    let a = |o: usize| format!("{}.{}.{}.{}", p[o], p[o + 1], p[o + 2], p[o + 3]);
    let be = |o: usize| u16::from_be_bytes([p[o], p[o + 1]]);
    (a(12), a(16), be(20), be(22), be(30))
}

const DL_FIELDS: &[&str] = &[
    "airpack_dl.layout",
    "airpack_dl.error",
    "airpack_dl.count",
    "airpack_dl.seed.src",
    "airpack_dl.seed.dst",
    "airpack_dl.seed.sport",
    "airpack_dl.seed.dport",
    "airpack_dl.seed.rtp_len",
    "rtp.seq",
    "rtp.ssrc",
    "airpack_dl.epoch",
    "airpack_dl.frame_seq",
    "airpack_dl.sid",
    "airpack_dl.ctl.full",
    "airpack_dl.rtp.seq",
    "airpack_dl.rtp.seq_lsb",
    "airpack_dl.rtp.ssrc",
    "airpack_dl.ip_id",
    "airpack_dl.src",
    "airpack_dl.src6",
    "airpack_dl.flow_label",
    "airpack_dl.len",
    "ip.dst",
];

#[test]
fn downlink_frame_pcaps_decode_as_the_vectors_say() {
    if !have("tshark") {
        println!("SKIP downlink_frame_pcaps_decode_as_the_vectors_say: tshark not installed");
        return;
    }
    let mut checked = 0;
    for v in vectors("downlink") {
        let format = v.get("format").unwrap();
        if format == "register" {
            continue;
        }
        let frame = v.section("frame")[0];
        let want = v.get("error").map(str::to_owned);
        let core = match format {
            "seed" => seed::decode(frame).err(),
            _ => compact::decode(frame).err(),
        };
        assert_eq!(want, core.map(|e| e.reason().to_owned()), "{}", v.name);
        // Forced to the vector's layout, and guessed (frames that decode).
        let mut runs = vec![format!("airpack_dl.layout:{format}")];
        if want.is_none() {
            runs.push("airpack_dl.layout:auto".into());
        }
        for opt in &runs {
            let rows = tshark(&pcap_of("downlink", &v.name), &[opt], DL_FIELDS);
            let r = &rows[0];
            let ctx = format!("{} ({opt}): {r:?}", v.name);
            assert_eq!(r["ip.dst"], ["225.0.0.10"], "{ctx}");
            assert_eq!(r["airpack_dl.layout"], [format], "{ctx}");
            assert_eq!(r["airpack_dl.error"], strs(want.iter()), "{ctx}");
            if want.is_some() {
                assert!(
                    r["rtp.seq"].is_empty(),
                    "a refused frame goes to RTP: {ctx}"
                );
                checked += 1;
                continue;
            }
            let packets = v.section("packet");
            assert_eq!(r["airpack_dl.count"], [packets.len().to_string()], "{ctx}");
            if format == "seed" {
                let h: Vec<_> = packets.iter().map(|p| ipv4_udp(p)).collect();
                assert_eq!(
                    r["airpack_dl.seed.src"],
                    strs(h.iter().map(|x| &x.0)),
                    "{ctx}"
                );
                assert_eq!(
                    r["airpack_dl.seed.dst"],
                    strs(h.iter().map(|x| &x.1)),
                    "{ctx}"
                );
                assert_eq!(
                    r["airpack_dl.seed.sport"],
                    strs(h.iter().map(|x| x.2)),
                    "{ctx}"
                );
                assert_eq!(
                    r["airpack_dl.seed.dport"],
                    strs(h.iter().map(|x| x.3)),
                    "{ctx}"
                );
                let lens = strs(packets.iter().map(|p| p.len() - 28));
                assert_eq!(r["airpack_dl.seed.rtp_len"], lens, "{ctx}");
                // Every packet's RTP header decoded by Wireshark's RTP dissector.
                assert_eq!(r["rtp.seq"], strs(h.iter().map(|x| x.4)), "{ctx}");
                assert_eq!(r["rtp.ssrc"].len(), packets.len(), "{ctx}");
            } else {
                check_compact(&v, frame, r, &ctx);
            }
            checked += 1;
        }
    }
    // seed: 2 refused + 1 x 2 runs; compact: 3 refused + 1 x 2 runs.
    assert!(checked >= 9, "only {checked} frames checked");
}

/// The compact vector's entries: stream ids from its `streams:` table and the
/// original packets, and the fields the core decoder reads.
fn check_compact(v: &Vector, frame: &[u8], r: &HashMap<String, Vec<String>>, ctx: &str) {
    assert_eq!(r["airpack_dl.epoch"], [v.get("epoch").unwrap()], "{ctx}");
    assert_eq!(
        r["airpack_dl.frame_seq"],
        [v.get("first-seq").unwrap()],
        "{ctx}"
    );
    // streams: 192.168.1.5:6600=1 [fd00::5]:7000=200
    let streams: HashMap<std::net::SocketAddr, &str> = v
        .get("streams")
        .unwrap()
        .split_whitespace()
        .map(|s| {
            let (a, id) = s.split_once('=').unwrap();
            (a.parse().unwrap(), id)
        })
        .collect();
    let sids: Vec<&str> = v
        .section("packet")
        .iter()
        .map(|p| {
            let (dst, port): (IpAddr, usize) = if p[0] >> 4 == 4 {
                (<[u8; 4]>::try_from(&p[16..20]).unwrap().into(), 22)
            } else {
                (<[u8; 16]>::try_from(&p[24..40]).unwrap().into(), 42)
            };
            let port = u16::from_be_bytes([p[port], p[port + 1]]);
            streams[&(dst, port).into()]
        })
        .collect();
    assert_eq!(r["airpack_dl.sid"], sids, "{ctx}");
    let f = compact::decode(frame).unwrap();
    let es: Vec<_> = f.iter().collect();
    let fulls = strs(es.iter().map(|e| u8::from(e.full.is_some())));
    assert_eq!(r["airpack_dl.ctl.full"], fulls, "{ctx}");
    let st: Vec<_> = es.iter().filter_map(|e| e.full.as_ref()).collect();
    let rtp: Vec<_> = st.iter().filter_map(|s| s.rtp.as_ref()).collect();
    assert_eq!(
        r["airpack_dl.rtp.seq"],
        strs(rtp.iter().map(|x| x.seq)),
        "{ctx}"
    );
    let ssrc = strs(rtp.iter().map(|x| format!("0x{:08x}", x.ssrc)));
    assert_eq!(r["airpack_dl.rtp.ssrc"], ssrc, "{ctx}");
    let lsb = es
        .iter()
        .filter(|e| e.rtp && e.full.is_none())
        .map(|e| e.seq_lsb);
    assert_eq!(r["airpack_dl.rtp.seq_lsb"], strs(lsb), "{ctx}");
    let ids = es.iter().filter_map(|e| match e.id {
        compact::IpId::Full(x) => Some(x),
        _ => None,
    });
    assert_eq!(r["airpack_dl.ip_id"], strs(ids), "{ctx}");
    let v4 = st.iter().filter(|s| s.src.is_ipv4()).map(|s| s.src);
    let v6 = st.iter().filter(|s| s.src.is_ipv6()).map(|s| s.src);
    assert_eq!(r["airpack_dl.src"], strs(v4), "{ctx}");
    assert_eq!(r["airpack_dl.src6"], strs(v6), "{ctx}");
    let flows = st
        .iter()
        .filter(|s| s.src.is_ipv6())
        .map(|s| format!("0x{:06x}", s.flow));
    assert_eq!(r["airpack_dl.flow_label"], strs(flows), "{ctx}");
    assert_eq!(
        r["airpack_dl.len"],
        strs(es.iter().map(|e| e.payload.len())),
        "{ctx}"
    );
    // The IPv6 packet's source, as the vector's original packet has it.
    let p6 = v
        .section("packet")
        .into_iter()
        .find(|p| p[0] >> 4 == 6)
        .unwrap();
    let src6 = IpAddr::from(<[u8; 16]>::try_from(&p6[8..24]).unwrap());
    assert_eq!(r["airpack_dl.src6"], [src6.to_string()], "{ctx}");
}

const REG_FIELDS: &[&str] = &[
    "airpack_dlreg.error",
    "airpack_dlreg.version",
    "airpack_dlreg.type",
    "airpack_dlreg.key_id",
    "airpack_dlreg.seq",
    "airpack_dlreg.addr",
    "airpack_dlreg.kind",
    "airpack_dlreg.first_port",
    "airpack_dlreg.last_port",
    "airpack_dlreg.lease",
    "airpack_dlreg.reply_to",
    "airpack_dlreg.epoch",
    "airpack_dlreg.run.first_port",
    "airpack_dlreg.run.count",
    "airpack_dlreg.run.first_sid",
    "airpack_dlreg.tag",
    "airpack_dlreg.received",
    "airpack_dlreg.missed",
    "airpack_dlreg.unrecovered",
];

#[test]
fn registration_pcaps_decode_as_the_core_reads_them() {
    if !have("tshark") {
        println!("SKIP registration_pcaps_decode_as_the_core_reads_them: tshark not installed");
        return;
    }
    let mut checked = 0;
    for v in vectors("downlink") {
        if v.get("format") != Some("register") {
            continue;
        }
        let msg = v.section("message")[0];
        let (m, tag) = register::decode(msg).unwrap();
        let rows = tshark(&pcap_of("downlink", &v.name), &[], REG_FIELDS);
        let r = &rows[0];
        let ctx = format!("{}: {r:?}", v.name);
        // bad_tag is a verification failure, not a parse error: the
        // dissector has no key and shows the tag unverified.
        assert!(r["airpack_dlreg.error"].is_empty(), "{ctx}");
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(r["airpack_dlreg.tag"], [hex], "{ctx}");
        assert_eq!(r["airpack_dlreg.key_id"], [m.key_id.to_string()], "{ctx}");
        assert_eq!(r["airpack_dlreg.seq"], [m.seq.to_string()], "{ctx}");
        match m.body {
            register::Body::Register {
                addr,
                ports,
                lease_secs,
            } => {
                assert_eq!(r["airpack_dlreg.type"], ["0x01"], "{ctx}");
                assert_eq!(r["airpack_dlreg.addr"], [addr.to_string()], "{ctx}");
                let register::Ports::Range(a, b) = ports else {
                    panic!("{ctx}: the vectors register a range")
                };
                assert_eq!(r["airpack_dlreg.kind"], ["2"], "{ctx}");
                assert_eq!(r["airpack_dlreg.first_port"], [a.to_string()], "{ctx}");
                assert_eq!(r["airpack_dlreg.last_port"], [b.to_string()], "{ctx}");
                assert_eq!(r["airpack_dlreg.lease"], [lease_secs.to_string()], "{ctx}");
            }
            register::Body::RegisterOk(ans) => {
                assert_eq!(r["airpack_dlreg.type"], ["0x81"], "{ctx}");
                assert_eq!(
                    r["airpack_dlreg.reply_to"],
                    [ans.reply_to.to_string()],
                    "{ctx}"
                );
                assert_eq!(r["airpack_dlreg.epoch"], [ans.epoch.to_string()], "{ctx}");
                assert_eq!(
                    r["airpack_dlreg.lease"],
                    [ans.lease_secs.to_string()],
                    "{ctx}"
                );
                let runs = ans.runs();
                let fp = strs(runs.iter().map(|x| x.first_port));
                assert_eq!(r["airpack_dlreg.run.first_port"], fp, "{ctx}");
                let n = strs(runs.iter().map(|x| x.count));
                assert_eq!(r["airpack_dlreg.run.count"], n, "{ctx}");
                let sid = strs(runs.iter().map(|x| x.first_sid));
                assert_eq!(r["airpack_dlreg.run.first_sid"], sid, "{ctx}");
            }
            register::Body::Report { addr, report } => {
                assert_eq!(r["airpack_dlreg.type"], ["0x04"], "{ctx}");
                assert_eq!(r["airpack_dlreg.addr"], [addr.to_string()], "{ctx}");
                let n = |k: &str, v: u32| assert_eq!(r[k], [v.to_string()], "{ctx}: {k}");
                n("airpack_dlreg.received", report.received);
                n("airpack_dlreg.missed", report.missed);
                n("airpack_dlreg.unrecovered", report.unrecovered);
            }
            _ => panic!("{ctx}: a message type the vectors do not have"),
        }
        checked += 1;
    }
    assert_eq!(
        checked, 4,
        "register_range, register_ok, register_bad_tag, register_report"
    );
    // The values register_range.hex documents in its comment (the seed's example).
    let rows = tshark(&pcap_of("downlink", "register_range"), &[], REG_FIELDS);
    assert_eq!(rows[0]["airpack_dlreg.addr"], ["192.168.1.5"]);
    assert_eq!(rows[0]["airpack_dlreg.first_port"], ["6600"]);
    assert_eq!(rows[0]["airpack_dlreg.last_port"], ["6700"]);
    assert_eq!(rows[0]["airpack_dlreg.seq"], ["1000000000000000"]);
}

#[test]
fn hello_and_downlink_pcaps_are_made_from_the_vectors() {
    if !have("python3") {
        println!("SKIP hello_and_downlink_pcaps_are_made_from_the_vectors: no python3");
        return;
    }
    let out = std::env::temp_dir().join(format!("airpack-pcaps2-{}", std::process::id()));
    let st = Command::new("python3")
        .arg(repo().join("dist/wireshark/make_pcaps.py"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let mut n = 0;
    for sub in ["hello", "downlink"] {
        for v in vectors(sub) {
            let name = format!("{sub}/{}.pcap", v.name);
            let made = std::fs::read(out.join(&name)).unwrap();
            let committed = std::fs::read(repo().join("dist/wireshark/pcaps").join(&name))
                .unwrap_or_else(|_| panic!("{name} not committed"));
            assert!(
                made == committed,
                "{name} differs from make_pcaps.py's output: rerun it"
            );
            n += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(n >= 18, "{n} pcaps");
}
