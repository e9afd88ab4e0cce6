//! Hostile input (truncated and corrupted hellos, frames and registration
//! messages: the core decoder's reason, no Lua error) and the installed plugin.

use super::{have, repo, strs, tshark, vectors, write_pcap};
use airpack_core::downlink::{compact, register, seed};
use airpack_core::neighbor::hello::Hello;
use std::process::Command;

/// IPv4/UDP frame (checksum 0) from 10.0.0.1 to 10.0.0.9.
fn udp_frame(port: u16, payload: &[u8]) -> Vec<u8> {
    let total = (28 + payload.len()) as u16;
    let mut f = vec![0x45, 0];
    f.extend(total.to_be_bytes());
    f.extend([0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 9]);
    f.extend(port.to_be_bytes());
    f.extend(port.to_be_bytes());
    f.extend((total - 20).to_be_bytes());
    f.extend([0, 0]);
    f.extend(payload);
    f
}

/// Every truncation of `msg` and each of its first 64 bytes flipped.
fn mutations(msg: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (1..=msg.len()).map(|n| msg[..n].to_vec()).collect();
    for i in 0..msg.len().min(64) {
        let mut m = msg.to_vec();
        m[i] ^= 0xff;
        out.push(m);
    }
    out
}

/// Hostile messages on one port: the dissector's error field on each equals
/// `reason` (the core decoder's verdict), and no Lua error.
fn hostile(
    port: u16,
    opts: &[&str],
    field: &str,
    msgs: &[Vec<u8>],
    reason: impl Fn(&[u8]) -> Option<&'static str>,
) {
    let dir = std::env::temp_dir().join(format!("airpack-hostile2-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("h.pcap");
    let frames: Vec<Vec<u8>> = msgs.iter().map(|m| udp_frame(port, m)).collect();
    write_pcap(&pcap, &frames);
    let rows = tshark(&pcap, opts, &[field]);
    assert_eq!(rows.len(), msgs.len());
    for (m, r) in msgs.iter().zip(&rows) {
        assert_eq!(r[field], strs(reason(m)), "{field} on {m:02x?}");
    }
    // -V walks every tree item: no Lua error there either.
    let lua = repo().join("dist/wireshark/airpack.lua");
    let mut cmd = Command::new("tshark");
    cmd.arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", lua.display()));
    for o in opts {
        cmd.args(["-o", o]);
    }
    let out = cmd.arg("-r").arg(&pcap).arg("-V").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let lua_err = text.lines().find(|l| l.contains("Lua Error"));
    assert!(
        lua_err.is_none() && !err.contains("Lua"),
        "{field}: {lua_err:?} {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_hellos_and_downlink_frames_match_the_core_and_raise_no_lua_error() {
    if !have("tshark") {
        println!("SKIP hostile_hellos_and_downlink_frames...: tshark not installed");
        return;
    }
    let mut hellos = Vec::new();
    for v in vectors("hello") {
        hellos.extend(mutations(v.section("hello")[0]));
    }
    hostile(4151, &[], "airpack_hello.error", &hellos, |m| {
        Hello::parse(m).err().map(|e| e.reason())
    });
    let (mut seeds, mut compacts, mut regs) = (Vec::new(), Vec::new(), Vec::new());
    for v in vectors("downlink") {
        match v.get("format").unwrap() {
            "seed" => seeds.extend(mutations(v.section("frame")[0])),
            "compact" => {
                let f = v.section("frame")[0];
                compacts.extend(mutations(f));
                // The same entries behind a repeat block (ap.redundancy):
                // 0x11, epoch, seq, block length, the block, the entries.
                if f.len() > 4 {
                    let e = &f[4..];
                    let mut r = vec![0x11, f[1], f[2], f[3]];
                    r.extend((e.len() as u16).to_be_bytes());
                    r.extend(e);
                    r.extend(e);
                    assert!(compact::decode(&r).is_ok() || compact::decode(f).is_err());
                    compacts.extend(mutations(&r));
                    compacts.push(r);
                    // Two blocks (redundancy depth 2): 0x13, epoch, seq,
                    // count 2, then each block with its length.
                    let mut r2 = vec![0x13, f[1], f[2], f[3], 2];
                    for _ in 0..2 {
                        r2.extend((e.len() as u16).to_be_bytes());
                        r2.extend(e);
                    }
                    r2.extend(e);
                    assert!(compact::decode(&r2).is_ok() || compact::decode(f).is_err());
                    compacts.extend(mutations(&r2));
                    compacts.push(r2);
                }
            }
            _ => regs.extend(mutations(v.section("message")[0])),
        }
    }
    let seed_opt = ["airpack_dl.layout:seed"];
    hostile(8888, &seed_opt, "airpack_dl.error", &seeds, |m| {
        seed::decode(m).err().map(|e| e.reason())
    });
    let compact_opt = ["airpack_dl.layout:compact"];
    hostile(8888, &compact_opt, "airpack_dl.error", &compacts, |m| {
        compact::decode(m).err().map(|e| e.reason())
    });
    hostile(8889, &[], "airpack_dlreg.error", &regs, |m| {
        register::decode(m).err().map(|e| e.reason())
    });
    println!(
        "hostile: {} hellos, {} seed and {} compact frames, {} registrations: reasons as the core's",
        hellos.len(),
        seeds.len(),
        compacts.len(),
        regs.len()
    );
}

/// The install command of docs/operator-guide.md, into a scratch HOME: every
/// format decodes from the plugin directory, each file loaded once.
#[test]
fn installed_plugin_decodes_every_format() {
    if !have("tshark") {
        println!("SKIP installed_plugin_decodes_every_format: tshark not installed");
        return;
    }
    let home = std::env::temp_dir().join(format!("airpack-wshome-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg(
            "mkdir -p ~/.local/lib/wireshark/plugins && \
             cp -r dist/wireshark/airpack.lua dist/wireshark/airpack ~/.local/lib/wireshark/plugins/",
        )
        .current_dir(repo())
        .env("HOME", &home)
        .status()
        .unwrap();
    assert!(st.success());
    let cases = [
        (
            "hello/hello_ipv4.pcap",
            "airpack_hello.sender",
            "0x0102030405060708",
        ),
        ("downlink/seed_two_calls.pcap", "airpack_dl.layout", "seed"),
        (
            "downlink/compact_voice.pcap",
            "airpack_dl.layout",
            "compact",
        ),
        ("downlink/register_ok.pcap", "airpack_dlreg.type", "0x81"),
        ("native_voice.pcap", "airpack.encoding", "native"),
    ];
    for (pcap, field, want) in cases {
        let out = Command::new("tshark")
            .env("HOME", &home)
            .arg("-n")
            .arg("-r")
            .arg(repo().join("dist/wireshark/pcaps").join(pcap))
            .args(["-T", "fields", "-e", field])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("Lua"),
            "{pcap}: {err}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().next(), Some(want), "{pcap}: {text}");
    }
    let _ = std::fs::remove_dir_all(&home);
}
