//! The run-state file: what a daemon changed outside its own process, so a
//! crash leaves nothing behind that the next start or `airpack cleanup`
//! cannot undo.
//!
//! Owns: the file format (JSON, one file per daemon next to its control
//! socket: `<socket>.state` with the extension replaced, e.g.
//! `/run/airpack/airpack.state`), writing it atomically (temporary file and
//! rename), deciding whether its owner is still alive (pid and process start
//! time), adopting a crashed run's record at start, and the cleanup steps
//! that need no configuration: restore sysctls, delete the nftables table
//! `inet airpack`, old-style tc filters, a left-over TUN device, the control
//! socket, the state file and the runtime directory when it is empty.
//!
//! What it records: the owner's pid, start time and network namespace, the
//! TUN name, the steered interfaces, the tc priority older versions used, the
//! nftables table (end-to-end), the control socket path and every sysctl the
//! daemon changed with its ORIGINAL value, written before the change. A
//! restart after a crash keeps those originals instead of recording the
//! crashed run's values as new ones.
//!
//! Must not touch: anything not named in a state file, except the table
//! `inet airpack` and tc filters at the recorded priority (both airpack's by
//! name). The tcx steering programs need no cleanup: they die with the process.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::netns::run_cmd;
use super::steer::{SteerSpec, NFT_TABLE};

/// Format version of the state file.
pub const VERSION: u32 = 1;
/// Runtime directory of the default control socket (`airpack cleanup`'s default).
pub const DEFAULT_RUNTIME_DIR: &str = "/run/airpack";

/// The files one daemon owns in its runtime directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Files {
    /// The state file.
    pub state: PathBuf,
    /// The control socket.
    pub control_socket: PathBuf,
}

impl Files {
    /// The files of the daemon with this control socket.
    pub fn for_socket(control_socket: &Path) -> Files {
        Files {
            state: control_socket.with_extension("state"),
            control_socket: control_socket.to_owned(),
        }
    }
}

/// A sysctl the daemon changed, with the value it had before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sysctl {
    /// `/proc/sys/...` path.
    pub path: PathBuf,
    /// The value before airpack changed it.
    pub original: String,
}

/// Contents of a state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// [`VERSION`].
    pub version: u32,
    /// The daemon's pid.
    pub pid: u32,
    /// Its start time (field 22 of `/proc/<pid>/stat`): a reused pid differs.
    pub start_time: u64,
    /// Device and inode of its network namespace.
    pub netns: (u64, u64),
    /// TUN device name.
    pub tun: String,
    /// Interfaces steered at the last change.
    pub interfaces: Vec<String>,
    /// tc filter priority (filters of older airpack versions).
    pub priority: u16,
    /// Whether the nftables table `inet airpack` was created.
    pub nft: bool,
    /// The control socket.
    pub control_socket: Option<PathBuf>,
    /// Changed sysctls, in change order, with their original values.
    pub sysctls: Vec<Sysctl>,
    /// The interface whose root qdisc is the gateway role's HTB tree
    /// (handle `1a0:`, `linux::htb`), while it is installed.
    #[serde(default)]
    pub htb: Option<String>,
}

fn ctx(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Start time of process `pid` (clock ticks since boot), if it exists.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The calling thread's network namespace (device, inode).
pub fn current_netns() -> io::Result<(u64, u64)> {
    let m = fs::metadata("/proc/thread-self/ns/net")?;
    Ok((m.dev(), m.ino()))
}

impl RunState {
    /// The record of the calling process for `spec`, with `sysctls` (an
    /// adopted crashed run's originals) already in it.
    pub fn new(spec: &SteerSpec, sysctls: Vec<Sysctl>) -> io::Result<RunState> {
        let pid = std::process::id();
        Ok(RunState {
            version: VERSION,
            pid,
            start_time: start_time(pid).unwrap_or(0),
            netns: current_netns()?,
            tun: spec.tun.clone(),
            interfaces: Vec::new(),
            priority: spec.priority,
            nft: false,
            control_socket: spec.state.as_ref().map(|f| f.control_socket.clone()),
            sysctls,
            htb: None,
        })
    }

    /// Refuses a record that names anything cleanup must not touch: a
    /// sysctl outside `/proc/sys/net/`, a TUN name that is not an interface
    /// name, or a control socket other than the one this state file belongs
    /// to (cleanup writes and deletes what the file names, as root).
    fn check(&self, path: &Path) -> io::Result<()> {
        let bad = |what: String| {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: refusing state file: {what}", path.display()),
            ))
        };
        for s in &self.sysctls {
            let p = &s.path;
            let net = p.starts_with("/proc/sys/net/")
                && p.components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::Normal(_) | std::path::Component::RootDir
                    )
                });
            if !net || s.original.len() > 64 || s.original.contains('\n') {
                return bad(format!("sysctl {}", p.display()));
            }
        }
        let ifname = |n: &str| {
            !n.is_empty()
                && !n.starts_with('-')
                && n.len() < 16
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        if !ifname(&self.tun) {
            return bad(format!("TUN name {:?}", self.tun));
        }
        if let Some(dev) = self.htb.as_deref().filter(|d| !ifname(d)) {
            return bad(format!("HTB interface {dev:?}"));
        }
        if let Some(sock) = &self.control_socket {
            if Files::for_socket(sock).state != path {
                return bad(format!("control socket {}", sock.display()));
            }
        }
        Ok(())
    }

    /// Whether the process that wrote this record still runs.
    pub fn owner_alive(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }

    /// Writes the record atomically (creating the directory if needed).
    pub fn save(&self, path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| ctx(dir, e))?;
        }
        let tmp = path.with_extension("state.tmp");
        let text = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        fs::write(&tmp, text).map_err(|e| ctx(&tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| ctx(path, e))
    }

    /// Reads a state file; `None` when there is none.
    pub fn load(path: &Path) -> io::Result<Option<RunState>> {
        let text = match fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ctx(path, e)),
        };
        let st: RunState = serde_json::from_slice(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not an airpack state file: {e}", path.display()),
            )
        })?;
        st.check(path)?;
        if st.version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: state file version {} (this airpack reads {VERSION})",
                    path.display(),
                    st.version
                ),
            ));
        }
        Ok(Some(st))
    }
}

/// At start: the record a previous run left at `path`, if it crashed in the
/// calling thread's network namespace (its sysctl originals are adopted).
/// An error if that run is still alive. A record of another namespace is
/// ignored (and overwritten by the new run).
pub fn adopt(path: &Path) -> io::Result<Option<RunState>> {
    let Some(old) = RunState::load(path)? else {
        return Ok(None);
    };
    if old.owner_alive() && old.pid != std::process::id() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{}: airpack (pid {}) is still running with this state",
                path.display(),
                old.pid
            ),
        ));
    }
    if old.netns != current_netns()? {
        return Ok(None);
    }
    Ok(Some(old))
}

/// Restores sysctls in reverse order of change (so `all` comes back before
/// the devices). Entries of devices that are gone are skipped.
pub fn restore_sysctls(sysctls: &[Sysctl]) -> io::Result<()> {
    let mut result = Ok(());
    for s in sysctls.iter().rev() {
        if let Err(e) = fs::write(&s.path, &s.original) {
            if e.kind() != io::ErrorKind::NotFound && result.is_ok() {
                result = Err(io::Error::new(
                    e.kind(),
                    format!("restoring {}: {e}", s.path.display()),
                ));
            }
        }
    }
    result
}

/// Deletes the nftables table `inet airpack` if it exists (no error without
/// `nft`: then there can be no table).
pub fn remove_nft_table() -> io::Result<()> {
    // Deleting a table that may not exist, without an error: declare it first.
    let drop_table = format!("table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\n");
    match run_cmd(&["nft", "-f", "-"], Some(&drop_table)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Deletes egress tc filters with preference `priority` that older airpack
/// versions installed (a clsact `bpf` filter redirecting into the TUN). No
/// error without `tc`.
pub fn remove_legacy_filters(priority: u16) -> io::Result<()> {
    let qdiscs = match run_cmd(&["tc", "qdisc", "show"], None) {
        Ok(q) => q,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let pref = priority.to_string();
    let mut result = Ok(());
    for line in qdiscs.lines().filter(|l| l.starts_with("qdisc clsact ")) {
        // "qdisc clsact ffff: dev eth0 parent ffff:fff1"
        let Some(dev) = line.split_whitespace().skip_while(|w| *w != "dev").nth(1) else {
            continue;
        };
        let shown = run_cmd(
            &["tc", "filter", "show", "dev", dev, "egress", "pref", &pref],
            None,
        )
        .unwrap_or_default();
        if shown.contains("bpf") && shown.contains("mirred") {
            let del = ["tc", "filter", "del", "dev", dev, "egress", "pref", &pref];
            if let Err(e) = run_cmd(&del, None) {
                result = result.and(Err(e));
            }
        }
    }
    result
}

/// What [`cleanup`] did, one line per action.
pub type Actions = Vec<String>;

/// Removes every trace of the dead daemon recorded in `path`: old tc
/// filters, the nftables table, its TUN device if it is still there
/// (persistent), the sysctls (restored), the control socket and the state
/// file. An error if the daemon still runs or the record belongs to another
/// network namespace. Idempotent.
pub fn cleanup(path: &Path) -> io::Result<Actions> {
    let mut done = Actions::new();
    let Some(st) = RunState::load(path)? else {
        return Ok(done);
    };
    if st.owner_alive() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{}: airpack (pid {}) is still running; stop it first",
                path.display(),
                st.pid
            ),
        ));
    }
    if st.netns != current_netns()? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: written in another network namespace (inode {}); run `airpack cleanup` inside it (ip netns exec ...)",
                path.display(),
                st.netns.1
            ),
        ));
    }
    remove_legacy_filters(st.priority)?;
    if st.nft {
        remove_nft_table()?;
        done.push(format!("deleted nftables table inet {NFT_TABLE}"));
    }
    if let Some(dev) = &st.htb {
        // The gateway's pacing tree: without its daemon it would keep TCP at
        // the last rate. Gone already (interface deleted) is fine.
        let handle = format!("{:x}:", super::htb::MAJOR);
        let del = [
            "tc",
            "qdisc",
            "del",
            "dev",
            dev.as_str(),
            "root",
            "handle",
            handle.as_str(),
        ];
        if run_cmd(&del, None).is_ok() {
            done.push(format!("deleted the gateway's HTB qdisc on {dev}"));
        }
    }
    let tun_dev = Path::new("/sys/class/net").join(&st.tun);
    if tun_dev.join("tun_flags").exists() {
        match run_cmd(&["ip", "link", "del", &st.tun], None) {
            Ok(_) => done.push(format!("deleted TUN device {}", st.tun)),
            // A killed daemon's TUN goes away with its last descriptor; the
            // kernel may finish that between the check and the delete (seen
            // once in 12 soak runs: "Cannot find device").
            Err(_) if !tun_dev.exists() => {}
            Err(e) => return Err(e),
        }
    }
    restore_sysctls(&st.sysctls)?;
    for s in &st.sysctls {
        done.push(format!("restored {} = {}", s.path.display(), s.original));
    }
    if let Some(sock) = &st.control_socket {
        match fs::remove_file(sock) {
            Ok(()) => done.push(format!("removed {}", sock.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(ctx(sock, e)),
        }
    }
    fs::remove_file(path).map_err(|e| ctx(path, e))?;
    done.push(format!("removed {}", path.display()));
    Ok(done)
}

/// `airpack cleanup`: [`cleanup`] for every `*.state` file in `dir`, then
/// `dir` itself if it is empty. The first error is returned after every file was tried.
pub fn cleanup_dir(dir: &Path) -> io::Result<Actions> {
    let mut done = Actions::new();
    let mut first_err = None;
    let mut files: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "state"))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(ctx(dir, e)),
    };
    files.sort();
    for f in &files {
        match cleanup(f) {
            Ok(a) => done.extend(a),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    // Only an empty directory: it may be shared.
    if fs::remove_dir(dir).is_ok() {
        done.push(format!("removed {}", dir.display()));
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_round_trip_and_know_their_owner() {
        let dir = std::env::temp_dir().join(format!("airpack-state-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let files = Files::for_socket(&dir.join("a.sock"));
        assert_eq!(files.state, dir.join("a.state"));
        let spec = SteerSpec {
            tun: "ap0".into(),
            bypass_mark: 1,
            priority: 4150,
            matches: vec![],
            steer_from_tun: true,
            interfaces: vec![],
            state: Some(files.clone()),
        };
        let mut st = RunState::new(
            &spec,
            vec![Sysctl {
                path: "/proc/sys/net/ipv4/ip_forward".into(),
                original: "0".into(),
            }],
        )
        .unwrap();
        assert!(st.owner_alive(), "this process");
        st.save(&files.state).unwrap();
        let back = RunState::load(&files.state).unwrap().unwrap();
        assert_eq!(back, st);
        assert_eq!(
            back.control_socket.as_deref(),
            Some(files.control_socket.as_path())
        );
        // Our own record is adopted (same pid: a re-install after a reload).
        assert_eq!(adopt(&files.state).unwrap(), Some(st.clone()));
        // A dead owner: a start time that does not match.
        st.start_time += 1;
        assert!(!st.owner_alive());
        st.pid = 1;
        st.save(&files.state).unwrap();
        assert!(adopt(&files.state).unwrap().is_some());
        // A record naming files cleanup must not touch is refused.
        let mut evil = st.clone();
        evil.sysctls[0].path = "/proc/sys/net/../../../etc/passwd".into();
        evil.save(&files.state).unwrap();
        assert!(RunState::load(&files.state).is_err());
        let mut evil = st.clone();
        evil.control_socket = Some("/etc/passwd".into());
        evil.save(&files.state).unwrap();
        assert!(RunState::load(&files.state).is_err());
        let mut evil = st.clone();
        evil.tun = "-rf".into();
        evil.save(&files.state).unwrap();
        assert!(RunState::load(&files.state).is_err());
        fs::write(&files.state, b"{").unwrap();
        assert!(RunState::load(&files.state).is_err());
        assert!(RunState::load(&dir.join("none.state")).unwrap().is_none());
        fs::remove_dir_all(&dir).unwrap();
    }
}
