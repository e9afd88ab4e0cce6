//! What a packager or a router relies on (issue 13): the daemon-only build
//! leaves the lab out, the man pages and completions cover every subcommand,
//! the control socket is root's only, and the shipped service definitions
//! (systemd unit, OpenWrt init script) are accepted by their own checkers.
//!
//! Owns: these checks. Must not touch: the daemon's behaviour (each check
//! reads files or runs the binary's generators and the checkers only).
//! A checker that is not installed makes its test print SKIP with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_airpack");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("airpack-pkg-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The package names in `airpack`'s normal dependency tree (this host's target).
fn dep_names(features: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "-p", "airpack", "-e", "normal"])
        .args(["--prefix", "none", "--offline", "--manifest-path"])
        .arg(repo().join("Cargo.toml"))
        .args(features)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn daemon_only_build_leaves_the_lab_out() {
    let full = dep_names(&[]);
    let daemon = dep_names(&["--no-default-features"]);
    // The default (developer) build has the lab and what only it needs.
    // airpack-voice (RTP, RTCP, E-model; serde only) is in both: the gateway
    // role's voice protection module needs it.
    assert!(daemon.iter().any(|n| n == "airpack-voice"));
    for lab_only in ["airpack-lab", "plotters", "rand"] {
        assert!(
            full.iter().any(|n| n == lab_only),
            "default build lacks {lab_only}"
        );
        assert!(
            !daemon.iter().any(|n| n == lab_only),
            "daemon-only build depends on {lab_only}: {daemon:?}"
        );
    }
    assert!(daemon.iter().any(|n| n == "airpack-core"));
    // Nor the regex engine that tracing-subscriber's `env-filter` brings (a
    // quarter of a MiB of the stripped binary; `RUST_LOG` is read as
    // `filter::Targets`), nor the `log` bridge nothing in the tree needs.
    for heavy in ["regex-automata", "regex-syntax", "matchers", "tracing-log"] {
        assert!(
            !daemon.iter().any(|n| n == heavy),
            "daemon-only build depends on {heavy} (docs/performance.md, \"Daemon binary size\")"
        );
    }
    // docs/performance.md reports these counts.
    println!(
        "dependencies: default {} / daemon-only {}",
        full.len(),
        daemon.len()
    );
    assert!(
        daemon.iter().all(|n| full.contains(n)),
        "the feature only removes"
    );
}

/// The subcommands named in `airpack --help` (the "Commands:" block).
fn subcommands() -> Vec<String> {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let block = text.split("Commands:").nth(1).expect("a Commands: block");
    let names: Vec<String> = block
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|n| n != "help")
        .collect();
    // The documented ones at least; `lab` and `voip` exactly with the feature.
    for must in ["run", "stats", "peers", "cleanup"] {
        assert!(
            names.iter().any(|n| n == must),
            "--help lacks {must}: {names:?}"
        );
    }
    for lab in ["lab", "voip"] {
        let present = names.iter().any(|n| n == lab);
        assert_eq!(present, cfg!(feature = "lab"), "{lab} in {names:?}");
    }
    assert!(!names.iter().any(|n| n == "generate"), "generate is hidden");
    names
}

#[test]
fn man_pages_cover_every_subcommand() {
    let dir = tmpdir("man");
    let st = Command::new(BIN)
        .args(["generate", "man"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success());
    let top = std::fs::read_to_string(dir.join("airpack.8")).unwrap();
    assert!(
        top.starts_with(".ie") || top.contains(".TH airpack 8"),
        "{top:.200}"
    );
    for sub in subcommands() {
        let page = std::fs::read_to_string(dir.join(format!("airpack-{sub}.8")))
            .unwrap_or_else(|e| panic!("airpack-{sub}.8: {e}"));
        assert!(
            page.contains(&format!(".TH airpack-{sub} 8")),
            "{page:.300}"
        );
        assert!(
            top.contains(&format!("airpack\\-{sub}(8)")),
            "airpack.8 omits {sub}"
        );
    }
    // `man` can render it, when installed.
    if have("man", "--version") {
        let out = Command::new("man")
            .arg("-l")
            .arg(dir.join("airpack-stats.8"))
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("--json"), "{text}");
    } else {
        println!("SKIP rendering with man: not installed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn completions_cover_every_subcommand() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["generate", "completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        for sub in &subs {
            assert!(
                text.contains(sub.as_str()),
                "{shell} completion lacks {sub}"
            );
        }
        let json = if shell == "fish" { "-l json" } else { "--json" };
        assert!(text.contains(json), "{shell} completion lacks --json");
    }
    // The bash one is valid bash.
    if have("bash", "--version") {
        let out = Command::new(BIN)
            .args(["generate", "completions", "bash"])
            .output()
            .unwrap();
        let dir = tmpdir("compl");
        let f = dir.join("airpack.bash");
        std::fs::write(&f, &out.stdout).unwrap();
        assert!(Command::new("bash")
            .arg("-n")
            .arg(&f)
            .status()
            .unwrap()
            .success());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn control_socket_is_root_or_group_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmpdir("ctl");
    let path = dir.join("t.sock");
    // Even under a permissive umask the socket ends up 0600.
    // SAFETY: umask has no preconditions; tests in this file create no other files meanwhile that care.
    let old = unsafe { libc::umask(0) };
    let server = airpack::daemon::control::Server::bind(&path, None);
    unsafe { libc::umask(old) };
    let server = server.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "control socket mode {mode:o}");
    server.remove_socket_file();

    // A setgid directory owned by a group: the socket is 0660 for that group.
    use std::os::unix::fs::MetadataExt;
    let gid = 4150;
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    // SAFETY: chown on a path we own, with a valid C string.
    let c = std::ffi::CString::new(shared.as_os_str().as_encoded_bytes()).unwrap();
    if unsafe { libc::chown(c.as_ptr(), 0, gid) } != 0 {
        println!("SKIP group-shared control socket: chown needs root");
    } else {
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2750)).unwrap();
        let path = shared.join("g.sock");
        let server = airpack::daemon::control::Server::bind(&path, None).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        assert_eq!(meta.gid(), gid);
        server.remove_socket_file();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn systemd_unit_verifies() {
    if !have("systemd-analyze", "--version") {
        println!(
            "SKIP systemd_unit_verifies: systemd-analyze not installed (Debian package systemd)"
        );
        return;
    }
    let dir = tmpdir("unit");
    let unit = std::fs::read_to_string(repo().join("dist/systemd/airpack.service")).unwrap();
    assert!(unit.contains("ExecStopPost=/usr/local/sbin/airpack cleanup"));
    // verify checks that the executables exist: point them at the built binary.
    let f = dir.join("airpack.service");
    std::fs::write(&f, unit.replace("/usr/local/sbin/airpack", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&f)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Lines about other units on this machine are not ours to judge.
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("airpack")).collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn openwrt_init_script_is_valid_sh_and_cleans_up_on_stop() {
    let init = repo().join("dist/openwrt/files/airpack.init");
    let text = std::fs::read_to_string(&init).unwrap();
    assert!(
        text.starts_with("#!/bin/sh /etc/rc.common"),
        "procd rc.common script"
    );
    assert!(text.contains("USE_PROCD=1"));
    // rc.common calls service_stopped after procd let go of the instances.
    let stop = text
        .split("service_stopped()")
        .nth(1)
        .expect("a service_stopped");
    assert!(text.contains("PROG=/usr/sbin/airpack\n"));
    assert!(
        stop.contains("\"$PROG\" cleanup --runtime-dir \"$RUNDIR\""),
        "{stop}"
    );
    assert!(Command::new("sh")
        .arg("-n")
        .arg(&init)
        .status()
        .unwrap()
        .success());
    if have("shellcheck", "--version") {
        // rc.common provides the procd helpers and the start/stop hooks.
        let out = Command::new("shellcheck")
            .args(["-s", "sh", "-e", "SC2034,SC2154,SC3043"])
            .arg(&init)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    } else {
        println!("SKIP shellcheck of the OpenWrt init script: shellcheck not installed");
    }
}

#[test]
fn openwrt_default_config_is_valid() {
    let file = repo().join("dist/openwrt/files/airpack.toml");
    let src = airpack::daemon::config::Source {
        file: Some(file.clone()),
        ..Default::default()
    };
    let plan = src
        .load()
        .unwrap_or_else(|e| panic!("{}: {e:#}", file.display()));
    // The init script, not the file, places the control socket.
    assert_eq!(
        plan.config.daemon.control_socket,
        PathBuf::from(airpack::daemon::control::DEFAULT_SOCKET)
    );
    let uci = std::fs::read_to_string(repo().join("dist/openwrt/files/airpack.config")).unwrap();
    assert!(uci.contains("option config '/etc/airpack/airpack.toml'"));
    // Every file the package Makefile installs exists.
    let mk = std::fs::read_to_string(repo().join("dist/openwrt/Makefile")).unwrap();
    for f in mk
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("./files/"))
    {
        assert!(repo().join("dist/openwrt/files").join(f).exists(), "{f}");
    }
    assert!(mk.contains("Build/Compile/Cargo,crates/airpack,--no-default-features"));
}

/// The init script's start and stop paths under a stand-in for OpenWrt's
/// rc.common/procd helpers: an enabled section becomes one procd instance
/// with its config and its own control socket, a disabled one none, and the
/// stop hook runs `airpack cleanup` on the runtime directory.
#[test]
fn openwrt_init_script_starts_instances_and_cleans_up() {
    let dir = tmpdir("init");
    let init = repo().join("dist/openwrt/files/airpack.init");
    let fake = dir.join("airpack");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$@\" >> '{}/prog.log'\n", dir.display()),
    )
    .unwrap();
    let cfg = dir.join("mesh.toml");
    std::fs::write(&cfg, "").unwrap();
    let harness = format!(
        r#"
config_load() {{ [ "$1" = airpack ]; }}
config_foreach() {{ "$1" mesh; "$1" off; }}
config_get_bool() {{ if [ "$2" = mesh ]; then eval "$1=1"; else eval "$1=0"; fi; }}
config_get() {{ eval "$1='{cfg}'"; }}
procd_open_instance() {{ echo "open $1"; }}
procd_set_param() {{ echo "param $*"; }}
procd_close_instance() {{ echo close; }}
pidof() {{ return 1; }}
. '{init}'
PROG='{fake}'
RUNDIR='{dir}/run'
start_service
service_stopped
"#,
        cfg = cfg.display(),
        init = init.display(),
        fake = fake.display(),
        dir = dir.display()
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("sh").arg("-c").arg(&harness).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = dir.display();
    let expected = format!(
        "open mesh\nparam command {d}/airpack run --config {c} --control-socket {d}/run/mesh.sock\n",
        c = cfg.display()
    );
    assert!(text.starts_with(&expected), "{text}");
    assert_eq!(
        text.matches("open ").count(),
        1,
        "disabled section started: {text}"
    );
    let prog = std::fs::read_to_string(dir.join("prog.log")).unwrap();
    assert_eq!(prog, format!("cleanup --runtime-dir {d}/run\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
