//! Kernel steering state: which packets go into the TUN.
//!
//! Owns, on each steered interface (the radios toward the peers): one tcx
//! egress link ([`super::ebpf::Link`]) running the class rules as an eBPF
//! program (the classic program of [`super::cbpf`], translated by
//! [`super::ebpf`]) that redirects matching packets into the TUN. Packets are
//! classified after the kernel routed them (forwarded or locally sent) out of
//! that interface, so received traffic and other interfaces pay nothing and
//! the kernel's routing tables and rules are left alone. In end-to-end mode
//! also the nftables table `inet airpack`: one prerouting rule that gives
//! packets entering from the TUN the bypass mark, so the inner packets an
//! endpoint forwards are never tunnelled again. And the sysctls that let
//! packets written into the TUN be received (rp_filter off on the TUN and, if
//! strict, for `all`) and forwarded (ip_forward, IPv6 forwarding), recorded
//! before they are changed in the run-state file ([`super::state`]) when the
//! spec names one.
//!
//! Fail-safe: a tcx link lives exactly as long as its file descriptor, which
//! only this process holds (never pinned). When the daemon dies for any
//! reason (SIGKILL, OOM kill, panic), the kernel detaches every program at
//! once and the interfaces send normally, unaggregated: nothing redirects
//! into a TUN that is gone. No qdisc is added or deleted either (that makes
//! the kernel deactivate the device's transmit queues for a moment and drop
//! what is sent then). What a crash does leave (the nftables table, the
//! sysctls, the control socket) is harmless to traffic and removed by the
//! next start or by `airpack cleanup`. tcx needs Linux 6.6 or later; on an
//! older kernel install fails with an error that says so (there is no
//! fallback to tc filters, which outlive the process and blackhole traffic
//! after a crash).
//!
//! Install is idempotent (leftovers of a crashed run are removed first);
//! interfaces that do not exist yet are attached by [`Steering::refresh`]
//! when they appear; [`Steering::remove`] or `Drop` detach the programs,
//! remove the nftables table, restore the sysctls and delete the state file.
//!
//! Must not touch: packet contents, peers, the TUN fd (only its name).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::ebpf::{self, Link, Program};
use super::netns::run_cmd;
use super::state::{RunState, Sysctl};
use super::{cbpf, state};

/// The nftables table name (family `inet`, end-to-end mode only); one per network namespace.
pub const NFT_TABLE: &str = "airpack";

/// One classifier rule in kernel form. Unset fields match anything. First
/// match wins: a rule with `steer == false` (class `bypass`) ends the
/// classification without steering.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// `true`: steer (bundle/opportunistic); `false`: bypass.
    pub steer: bool,
    /// IP protocol number (17 = UDP, 6 = TCP, 1 = ICMP, 58 = ICMPv6 ...).
    pub protocol: Option<u8>,
    /// Either the source or the destination port in this inclusive range.
    pub ports: Option<(u16, u16)>,
    /// Source port in this inclusive range.
    pub src_ports: Option<(u16, u16)>,
    /// Destination port in this inclusive range.
    pub dst_ports: Option<(u16, u16)>,
    /// DSCP (0..=63) in this inclusive range.
    pub dscp: Option<(u8, u8)>,
    /// IP packet length (header included) in this inclusive range.
    pub len: Option<(u16, u16)>,
    /// 4 or 6.
    pub version: Option<u8>,
    /// Existing packet mark: `(value, mask)`, matches `mark & mask == value`.
    pub mark: Option<(u32, u32)>,
}

/// Everything [`Steering::install`] needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SteerSpec {
    /// TUN device name the filters redirect into.
    pub tun: String,
    /// Mark carried by the daemon's own sockets (config `bypass_mark`); such
    /// packets are never steered. Non-zero.
    pub bypass_mark: u32,
    /// tc filter preference (config `filter_priority`, 1-65535) of the
    /// egress filters older airpack versions installed: removed when found.
    pub priority: u16,
    /// Class rules, in order.
    pub matches: Vec<Match>,
    /// Whether packets arriving *from* the TUN (inner packets the daemon
    /// wrote after decoding a bundle) may be steered again when forwarded.
    /// Hop-by-hop: `true` (re-aggregation at every hop). End-to-end: `false`
    /// (the tunnel endpoint forwards them normally).
    pub steer_from_tun: bool,
    /// Interfaces whose egress is steered (missing ones are attached when
    /// they appear, see [`Steering::refresh`]).
    pub interfaces: Vec<String>,
    /// Where to record what this run changes (the run-state file, see
    /// [`super::state`]) and the control socket it names; `None`: not recorded.
    pub state: Option<state::Files>,
}

/// Our program on one interface.
#[derive(Debug)]
struct Attached {
    name: String,
    ifindex: u32,
    /// Detaches the program when dropped.
    _link: Link,
}

/// Installed steering state; removed by [`Steering::remove`] or on drop.
#[derive(Debug)]
pub struct Steering {
    spec: SteerSpec,
    tun_ifindex: u32,
    prog: Program,
    attached: Vec<Attached>,
    /// What this run changed: sysctls with their original values, in change
    /// order (written to the state file before each change), the nft table.
    record: RunState,
    removed: bool,
}

fn inval(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn ordered<T: PartialOrd + std::fmt::Display>(r: Option<(T, T)>, what: &str) -> io::Result<()> {
    match r {
        Some((a, b)) if a > b => Err(inval(format!("{what}: empty range {a}-{b}"))),
        _ => Ok(()),
    }
}

/// Checks one rule: ranges not empty, ports only for protocols with ports,
/// version 4 or 6, DSCP at most 63, mark value within its mask.
fn check_match(m: &Match) -> io::Result<()> {
    ordered(m.ports, "ports")?;
    ordered(m.src_ports, "src_ports")?;
    ordered(m.dst_ports, "dst_ports")?;
    ordered(m.dscp, "dscp")?;
    ordered(m.len, "len")?;
    if let Some(v) = m.version.filter(|v| !matches!(v, 4 | 6)) {
        return Err(inval(format!("version must be 4 or 6, not {v}")));
    }
    let has_ports = m.ports.is_some() || m.src_ports.is_some() || m.dst_ports.is_some();
    match m.protocol {
        Some(p) if has_ports && !matches!(p, 6 | 17 | 33 | 132 | 136) => {
            return Err(inval(format!(
                "ports given for protocol {p}, which has none"
            )))
        }
        None if has_ports => return Err(inval("ports given without a protocol".into())),
        _ => {}
    }
    if let Some((_, hi)) = m.dscp.filter(|d| d.1 > 63) {
        return Err(inval(format!("dscp {hi} > 63")));
    }
    if let Some((value, mask)) = m.mark.filter(|(v, mask)| v & !mask != 0) {
        return Err(inval(format!(
            "mark value {value:#x} has bits outside mask {mask:#x}"
        )));
    }
    Ok(())
}

fn valid_ifname(n: &str) -> bool {
    !n.is_empty()
        && n.len() < 16
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn check_spec(spec: &SteerSpec) -> io::Result<()> {
    if spec.bypass_mark == 0 {
        return Err(inval("bypass_mark must be non-zero".into()));
    }
    if spec.priority == 0 {
        return Err(inval("filter priority must be in 1-65535".into()));
    }
    if !valid_ifname(&spec.tun) {
        return Err(inval(
            "tun name must be 1 to 15 characters of [A-Za-z0-9._-]".into(),
        ));
    }
    for i in &spec.interfaces {
        if !valid_ifname(i) || *i == spec.tun {
            return Err(inval(format!(
                "cannot steer interface {i:?} (a valid name other than the TUN)"
            )));
        }
    }
    spec.matches.iter().try_for_each(check_match)
}

fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

fn read_sysctl(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_string())
}

/// The interface index of `name` in the calling thread's namespace, if it exists.
fn ifindex(name: &str) -> Option<u32> {
    super::tun::ifindex(name).ok()
}

/// Why a tcx link could not be created, in words an operator can act on.
fn attach_error(dev: &str, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EINVAL | libc::EOPNOTSUPP | 524 /* ENOTSUPP */) => {
            " (this kernel has no tcx links: airpack needs Linux 6.6 or later with CONFIG_NET_XGRESS)"
        }
        Some(libc::EPERM) => " (needs CAP_BPF and CAP_NET_ADMIN, or root)",
        _ => "",
    };
    io::Error::new(
        e.kind(),
        format!("attaching the steering program to the egress of {dev}: {e}{why}"),
    )
}

/// The `nft` script of the end-to-end guard (replaces table `inet airpack` atomically).
fn nft_guard(spec: &SteerSpec) -> String {
    format!(
        "table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\ntable inet {NFT_TABLE} {{\n\tchain prerouting {{\n\t\ttype filter hook prerouting priority mangle; policy accept;\n\t\tiifname \"{}\" meta mark set {:#x}\n\t}}\n}}\n",
        spec.tun, spec.bypass_mark
    )
}

impl Steering {
    /// Loads the program (the verifier's verdict comes before anything
    /// changes), adopts or removes the leftovers of a previous run (its state
    /// file, old tc filters, the nftables table), records this run in the
    /// state file, then sets the sysctls, the end-to-end guard and the
    /// programs. On error, whatever was installed is removed again. The TUN
    /// device must exist. Interfaces in `spec.interfaces` that do not exist
    /// yet are attached by a later [`Steering::refresh`]; failing to attach
    /// to one that exists is an error. Runs `nft` (and `tc` for old filters)
    /// in the calling thread's namespace.
    pub fn install(spec: &SteerSpec) -> io::Result<Steering> {
        check_spec(spec)?;
        let tun_ifindex = super::tun::ifindex(&spec.tun)
            .map_err(|e| io::Error::new(e.kind(), format!("TUN {}: {e}", spec.tun)))?;
        let prog = ebpf::load_steering(spec.bypass_mark, &spec.matches, tun_ifindex)?;
        // A crashed run's record: its original sysctl values are the real
        // originals (the current ones are what it set).
        let mut restore = Vec::new();
        if let Some(files) = &spec.state {
            if let Some(old) = state::adopt(&files.state)? {
                restore = old.sysctls;
            }
        }
        Self::cleanup(spec)?;
        let record = RunState::new(spec, restore)?;
        let mut st = Steering {
            spec: spec.clone(),
            tun_ifindex,
            prog,
            attached: Vec::new(),
            record,
            removed: false,
        };
        match st.install_inner() {
            Ok(()) => Ok(st),
            Err(e) => {
                let _ = st.remove_inner();
                Err(e)
            }
        }
    }

    /// Records (or forgets, `None`) the interface holding the gateway role's
    /// HTB tree, so `airpack cleanup` removes it after a crash.
    pub fn record_htb(&mut self, dev: Option<String>) -> io::Result<()> {
        self.record.htb = dev;
        self.save()
    }

    fn save(&self) -> io::Result<()> {
        match &self.spec.state {
            Some(f) => self.record.save(&f.state),
            None => Ok(()),
        }
    }

    /// Sets a sysctl (per network namespace of the calling thread for
    /// net.*). The original value is recorded, and written to the state file,
    /// before the change; a value an adopted record already holds is kept.
    fn set_sysctl(&mut self, path: PathBuf, value: &str) -> io::Result<()> {
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let old = read_sysctl(&path).map_err(ctx)?;
        if old == value {
            return Ok(());
        }
        if !self.record.sysctls.iter().any(|s| s.path == path) {
            self.record.sysctls.push(Sysctl {
                path: path.clone(),
                original: old,
            });
            self.save()?;
        }
        fs::write(&path, value).map_err(ctx)
    }

    fn install_inner(&mut self) -> io::Result<()> {
        // Recorded before anything changes.
        self.save()?;
        let tun = self.spec.tun.clone();
        // Sysctls first: once a program is attached, packets flow into the TUN.
        let tun_rp = sysctl_path(&format!("net.ipv4.conf.{tun}.rp_filter"));
        self.set_sysctl(tun_rp, "0")?;
        // The effective rp_filter is max(all, device): with `all` strict (1),
        // packets written into the TUN would fail the reverse-path check
        // (their sources route via the radio, not the TUN). Turn `all` off
        // but keep every existing interface exactly as strict as it was.
        let all = sysctl_path("net.ipv4.conf.all.rp_filter");
        if read_sysctl(&all)? == "1" {
            let mut devs: Vec<PathBuf> = Vec::new();
            for entry in fs::read_dir("/proc/sys/net/ipv4/conf")? {
                let entry = entry?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name != "all" && name != "default" && name != tun.as_str() {
                    devs.push(entry.path().join("rp_filter"));
                }
            }
            for dev in devs {
                if read_sysctl(&dev)? == "0" {
                    self.set_sysctl(dev, "1")?;
                }
            }
            self.set_sysctl(all, "0")?;
        }
        self.set_sysctl(sysctl_path("net.ipv4.ip_forward"), "1")?;
        if Path::new("/proc/sys/net/ipv6").exists() {
            self.set_sysctl(sysctl_path("net.ipv6.conf.all.forwarding"), "1")?;
        }
        if !self.spec.steer_from_tun {
            self.record.nft = true;
            self.save()?;
            run_cmd(&["nft", "-f", "-"], Some(&nft_guard(&self.spec)))?;
        }
        // The programs last: they are what starts steering.
        self.refresh().map(|_| ())
    }

    /// Attaches the program to every wanted interface that exists and does
    /// not have it yet (new, or deleted and created again), and forgets
    /// interfaces that are gone. Call when links change. Returns whether
    /// anything changed; an attach failure is returned after every interface
    /// was tried.
    pub fn refresh(&mut self) -> io::Result<bool> {
        let mut changed = false;
        let mut first_err = None;
        self.attached.retain(|a| {
            let same = ifindex(&a.name) == Some(a.ifindex);
            changed |= !same;
            same
        });
        for name in self.spec.interfaces.clone() {
            if self.attached.iter().any(|a| a.name == name) {
                continue;
            }
            let Some(idx) = ifindex(&name) else { continue };
            match Link::tcx_egress(&self.prog, idx) {
                Ok(link) => {
                    self.attached.push(Attached {
                        name,
                        ifindex: idx,
                        _link: link,
                    });
                    changed = true;
                }
                Err(e) => {
                    first_err.get_or_insert(attach_error(&name, e));
                }
            }
        }
        if changed {
            self.record.interfaces = self.steered();
            if let Err(e) = self.save() {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(changed),
        }
    }

    /// Steers exactly these interfaces from now on: detaches from the others,
    /// attaches to the new ones that exist.
    pub fn set_interfaces(&mut self, interfaces: &[String]) -> io::Result<()> {
        let mut spec = self.spec.clone();
        spec.interfaces = interfaces.to_vec();
        check_spec(&spec)?;
        self.spec = spec;
        let wanted = &self.spec.interfaces;
        // Dropping a link detaches its program.
        self.attached.retain(|a| wanted.contains(&a.name));
        self.record.interfaces = self.steered();
        let saved = self.save();
        self.refresh().and(saved).map(|_| ())
    }

    /// Replaces the class rules on every steered interface (SIGHUP reload
    /// with new `[[class]]` rules), atomically per interface. On error the
    /// old program stays where it could not be replaced and the error is
    /// returned.
    pub fn update_matches(&mut self, matches: &[Match]) -> io::Result<()> {
        matches.iter().try_for_each(check_match)?;
        let prog = ebpf::load_steering(self.spec.bypass_mark, matches, self.tun_ifindex)?;
        for a in &self.attached {
            a._link.update(&prog).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("replacing the steering program on {}: {e}", a.name),
                )
            })?;
        }
        self.spec.matches = matches.to_vec();
        self.prog = prog;
        Ok(())
    }

    /// The spec this state was installed from (with the current interfaces and rules).
    pub fn spec(&self) -> &SteerSpec {
        &self.spec
    }

    /// Interfaces whose egress is steered now.
    pub fn steered(&self) -> Vec<String> {
        self.attached.iter().map(|a| a.name.clone()).collect()
    }

    /// The classic BPF program of `spec`'s rules in tc's `bytecode` syntax
    /// (for logs and tests; the kernel runs its eBPF translation).
    pub fn bytecode(spec: &SteerSpec) -> io::Result<String> {
        check_spec(spec)?;
        Ok(cbpf::bytecode(&cbpf::compile(
            spec.bypass_mark,
            &spec.matches,
        )?))
    }

    /// Removes everything, restores changed sysctls and deletes the state
    /// file. Errors are reported after every step was tried (the state file
    /// stays then, for `airpack cleanup`).
    pub fn remove(mut self) -> io::Result<()> {
        self.remove_inner()
    }

    /// Removes any steering state a previous run with `spec`'s priority left
    /// behind (no error if there is none): egress filters older airpack
    /// versions installed with that priority, and the end-to-end nftables
    /// table. Does not touch sysctls (see [`super::state`] for those).
    pub fn cleanup(spec: &SteerSpec) -> io::Result<()> {
        check_spec(spec)?;
        let a = state::remove_legacy_filters(spec.priority);
        let b = state::remove_nft_table();
        a.and(b)
    }

    fn remove_inner(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        // Closing the links detaches the programs.
        self.attached.clear();
        let mut result = Ok(());
        if self.record.nft {
            if let Err(e) = state::remove_nft_table() {
                result = result.and(Err(e));
            }
        }
        if let Err(e) = state::restore_sysctls(&self.record.sysctls) {
            result = result.and(Err(e));
        }
        if let (Ok(()), Some(f)) = (&result, &self.spec.state) {
            if let Err(e) = fs::remove_file(&f.state) {
                if e.kind() != io::ErrorKind::NotFound {
                    result = Err(io::Error::new(
                        e.kind(),
                        format!("removing {}: {e}", f.state.display()),
                    ));
                }
            }
        }
        result
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        let _ = self.remove_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(matches: Vec<Match>) -> SteerSpec {
        SteerSpec {
            tun: "airpack0".into(),
            bypass_mark: 0x4151,
            priority: 4150,
            matches,
            steer_from_tun: true,
            interfaces: vec!["wlan0".into()],
            state: None,
        }
    }

    #[test]
    fn end_to_end_guard_marks_packets_from_the_tun() {
        let mut e2e = spec(vec![]);
        e2e.steer_from_tun = false;
        let s = nft_guard(&e2e);
        assert!(s.contains("type filter hook prerouting priority mangle"));
        assert!(s.contains("iifname \"airpack0\" meta mark set 0x4151"));
        assert!(s.starts_with("table inet airpack {}\ndelete table inet airpack\n"));
    }

    #[test]
    fn invalid_specs_are_rejected() {
        let bad = |m: Match| Steering::bytecode(&spec(vec![m])).is_err();
        assert!(!bad(Match::default()));
        assert!(bad(Match {
            protocol: Some(17),
            ports: Some((10, 5)),
            ..Match::default()
        }));
        assert!(bad(Match {
            protocol: Some(1),
            ports: Some((1, 5)),
            ..Match::default()
        }));
        assert!(bad(Match {
            dst_ports: Some((1, 5)),
            ..Match::default()
        }));
        assert!(bad(Match {
            version: Some(5),
            ..Match::default()
        }));
        assert!(bad(Match {
            dscp: Some((0, 64)),
            ..Match::default()
        }));
        assert!(bad(Match {
            len: Some((300, 200)),
            ..Match::default()
        }));
        assert!(bad(Match {
            mark: Some((0x100, 0xff)),
            ..Match::default()
        }));
        let check = |f: fn(&mut SteerSpec)| {
            let mut s = spec(vec![]);
            f(&mut s);
            Steering::bytecode(&s).is_err()
        };
        assert!(check(|s| s.bypass_mark = 0));
        assert!(check(|s| s.priority = 0));
        assert!(check(|s| s.tun = "a\"; flush ruleset".into()));
        assert!(check(|s| s.interfaces = vec!["airpack0".into()]));
        assert!(check(|s| s.interfaces = vec!["eth 0".into()]));
        assert!(!check(|s| s.interfaces = vec![]));
    }
}
