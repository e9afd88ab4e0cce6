//! Kernel steering state: which packets go into the TUN.
//!
//! Owns, on each steered interface (the radios toward the peers): a `clsact`
//! qdisc (added when absent, and left in place afterwards, see below) and one
//! egress filter,
//! `pref <priority> handle 1 protocol all bpf bytecode <program> action mirred egress redirect dev <tun>`,
//! whose classic BPF program ([`super::cbpf`]) is the class rules. Packets are
//! classified after the kernel routed them (forwarded or locally sent) out of
//! that interface, so received traffic and other interfaces pay nothing and
//! the kernel's routing tables and rules are left alone. In end-to-end mode
//! also the nftables table `inet airpack`: one prerouting rule that gives
//! packets entering from the TUN the bypass mark, so the inner packets an
//! endpoint forwards are never tunnelled again. And the sysctls that let
//! packets written into the TUN be received (rp_filter off on the TUN and, if
//! strict, for `all`) and forwarded (ip_forward, IPv6 forwarding).
//!
//! Install is idempotent (leftovers of a crashed run are removed first);
//! interfaces that do not exist yet are attached by [`Steering::refresh`]
//! when they appear; [`Steering::remove`] or `Drop` remove the filters and
//! the nftables table and restore the sysctls it changed. The `clsact` qdisc
//! stays: adding or deleting a qdisc makes the kernel deactivate the device's
//! transmit queues for a moment (`qdisc_graft` calls `dev_deactivate`), and
//! packets sent in that moment are dropped, so deleting it on stop lost
//! packets that were being sent as steering ended. An empty `clsact` has no
//! effect on traffic, and the next start finds it and adds nothing.
//!
//! Must not touch: packet contents, peers, the TUN fd (only its name).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::cbpf;
use super::netns::run_cmd;

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
    /// tc filter preference of the egress filter (config `filter_priority`,
    /// 1-65535); it identifies airpack's filter on an interface.
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
}

/// Our filter on one interface.
#[derive(Debug)]
struct Attached {
    name: String,
    ifindex: u32,
}

/// Installed steering state; removed by [`Steering::remove`] or on drop.
#[derive(Debug)]
pub struct Steering {
    spec: SteerSpec,
    bytecode: String,
    attached: Vec<Attached>,
    /// Sysctls changed at install, with their previous values, in change order.
    restore: Vec<(PathBuf, String)>,
    nft: bool,
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

/// Sets a sysctl (per network namespace of the calling thread for net.*),
/// remembering the previous value in `restore` when it changes.
fn set_sysctl(path: PathBuf, value: &str, restore: &mut Vec<(PathBuf, String)>) -> io::Result<()> {
    let old = read_sysctl(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    if old == value {
        return Ok(());
    }
    fs::write(&path, value)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    restore.push((path, old));
    Ok(())
}

/// The interface index of `name` in the calling thread's namespace, if it exists.
fn ifindex(name: &str) -> Option<u32> {
    super::tun::ifindex(name).ok()
}

/// Deletes our egress filter on `dev` (the `clsact` qdisc stays: see the module documentation).
fn detach(dev: &str, priority: u16) -> io::Result<()> {
    let pref = priority.to_string();
    run_cmd(
        &["tc", "filter", "del", "dev", dev, "egress", "pref", &pref],
        None,
    )
    .map(|_| ())
}

/// The `nft` script of the end-to-end guard (replaces table `inet airpack` atomically).
fn nft_guard(spec: &SteerSpec) -> String {
    format!(
        "table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\ntable inet {NFT_TABLE} {{\n\tchain prerouting {{\n\t\ttype filter hook prerouting priority mangle; policy accept;\n\t\tiifname \"{}\" meta mark set {:#x}\n\t}}\n}}\n",
        spec.tun, spec.bypass_mark
    )
}

impl Steering {
    /// Removes leftovers of a previous run with the same priority, then sets
    /// the sysctls, the end-to-end guard and the filters. On error, whatever
    /// was installed is removed again. The TUN device must exist. Interfaces
    /// in `spec.interfaces` that do not exist yet are attached by a later
    /// [`Steering::refresh`]; failing to attach to one that exists is an error.
    /// Runs `tc`, `nft` and `ip` in the calling thread's namespace.
    pub fn install(spec: &SteerSpec) -> io::Result<Steering> {
        check_spec(spec)?;
        let bytecode = cbpf::bytecode(&cbpf::compile(spec.bypass_mark, &spec.matches)?);
        Self::cleanup(spec)?;
        let mut st = Steering {
            spec: spec.clone(),
            bytecode,
            attached: Vec::new(),
            restore: Vec::new(),
            nft: false,
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

    fn install_inner(&mut self) -> io::Result<()> {
        let tun = self.spec.tun.clone();
        // Sysctls first: once a filter exists, packets flow into the TUN.
        let tun_rp = sysctl_path(&format!("net.ipv4.conf.{tun}.rp_filter"));
        set_sysctl(tun_rp, "0", &mut self.restore)?;
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
                    set_sysctl(dev, "1", &mut self.restore)?;
                }
            }
            set_sysctl(all, "0", &mut self.restore)?;
        }
        set_sysctl(sysctl_path("net.ipv4.ip_forward"), "1", &mut self.restore)?;
        if Path::new("/proc/sys/net/ipv6").exists() {
            set_sysctl(
                sysctl_path("net.ipv6.conf.all.forwarding"),
                "1",
                &mut self.restore,
            )?;
        }
        if !self.spec.steer_from_tun {
            run_cmd(&["nft", "-f", "-"], Some(&nft_guard(&self.spec)))?;
            self.nft = true;
        }
        // The filters last: they are what starts steering.
        self.refresh().map(|_| ())
    }

    /// Attaches the filter to every wanted interface that exists and does not
    /// have it yet (new, or deleted and created again), and forgets interfaces
    /// that are gone. Call when links change. Returns whether anything
    /// changed; an attach failure is returned after every interface was tried.
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
            match self.attach(&name) {
                Ok(()) => {
                    self.attached.push(Attached { name, ifindex: idx });
                    changed = true;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(changed),
        }
    }

    /// Adds `clsact` if it is not there yet and (re)places our filter.
    fn attach(&self, dev: &str) -> io::Result<()> {
        let qdiscs = run_cmd(&["tc", "qdisc", "show", "dev", dev], None)?;
        if !qdiscs.contains("clsact") {
            if let Err(e) = run_cmd(&["tc", "qdisc", "add", "dev", dev, "clsact"], None) {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot add a clsact qdisc to {dev} (an `ingress` qdisc there must be replaced by clsact): {e}"),
                ));
            }
        }
        self.place_filter(dev, &self.bytecode)
    }

    fn place_filter(&self, dev: &str, bytecode: &str) -> io::Result<()> {
        let pref = self.spec.priority.to_string();
        run_cmd(
            &[
                "tc",
                "filter",
                "replace",
                "dev",
                dev,
                "egress",
                "pref",
                &pref,
                "handle",
                "1",
                "protocol",
                "all",
                "bpf",
                "bytecode",
                bytecode,
                "action",
                "mirred",
                "egress",
                "redirect",
                "dev",
                &self.spec.tun,
            ],
            None,
        )
        .map(|_| ())
    }

    /// Steers exactly these interfaces from now on: detaches from the others,
    /// attaches to the new ones that exist.
    pub fn set_interfaces(&mut self, interfaces: &[String]) -> io::Result<()> {
        let mut spec = self.spec.clone();
        spec.interfaces = interfaces.to_vec();
        check_spec(&spec)?;
        self.spec = spec;
        let mut first_err = None;
        let wanted = &self.spec.interfaces;
        let (keep, drop): (Vec<_>, Vec<_>) = std::mem::take(&mut self.attached)
            .into_iter()
            .partition(|a| wanted.contains(&a.name));
        self.attached = keep;
        for a in drop {
            if ifindex(&a.name) == Some(a.ifindex) {
                if let Err(e) = detach(&a.name, self.spec.priority) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.refresh() {
            first_err.get_or_insert(e);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Replaces the class rules on every steered interface (SIGHUP reload
    /// with new `[[class]]` rules). On error the old program stays where it
    /// could not be replaced and the error is returned.
    pub fn update_matches(&mut self, matches: &[Match]) -> io::Result<()> {
        matches.iter().try_for_each(check_match)?;
        let bytecode = cbpf::bytecode(&cbpf::compile(self.spec.bypass_mark, matches)?);
        for a in &self.attached {
            self.place_filter(&a.name, &bytecode)?;
        }
        self.spec.matches = matches.to_vec();
        self.bytecode = bytecode;
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

    /// The classic BPF program of `spec`'s rules in tc's `bytecode` syntax (for logs and tests).
    pub fn bytecode(spec: &SteerSpec) -> io::Result<String> {
        check_spec(spec)?;
        Ok(cbpf::bytecode(&cbpf::compile(
            spec.bypass_mark,
            &spec.matches,
        )?))
    }

    /// Removes everything and restores changed sysctls. Errors are reported
    /// after every step was tried.
    pub fn remove(mut self) -> io::Result<()> {
        self.remove_inner()
    }

    /// Removes any steering state a previous run with `spec`'s priority left
    /// behind (no error if there is none): our egress filter on every
    /// interface of the namespace, and the end-to-end nftables table. Does not touch sysctls
    /// (their old values died with the previous run).
    pub fn cleanup(spec: &SteerSpec) -> io::Result<()> {
        check_spec(spec)?;
        let mut first_err = None;
        let qdiscs = run_cmd(&["tc", "qdisc", "show"], None)?;
        let pref = spec.priority.to_string();
        for line in qdiscs.lines().filter(|l| l.starts_with("qdisc clsact ")) {
            // "qdisc clsact ffff: dev eth0 parent ffff:fff1"
            let Some(dev) = line.split_whitespace().skip_while(|w| *w != "dev").nth(1) else {
                continue;
            };
            let ours = run_cmd(
                &["tc", "filter", "show", "dev", dev, "egress", "pref", &pref],
                None,
            )
            .map(|out| !out.trim().is_empty())
            .unwrap_or(false);
            if ours {
                if let Err(e) = detach(dev, spec.priority) {
                    first_err.get_or_insert(e);
                }
            }
        }
        // Deleting a table that may not exist, without an error: declare it first.
        // Without `nft` there can be no table (and hop-by-hop does not need it).
        let drop_table = format!("table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\n");
        if let Err(e) = run_cmd(&["nft", "-f", "-"], Some(&drop_table)) {
            if e.kind() != io::ErrorKind::NotFound {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn remove_inner(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let mut result = Ok(());
        for a in std::mem::take(&mut self.attached) {
            // A device that is gone took the filter with it.
            if ifindex(&a.name) == Some(a.ifindex) {
                if let Err(e) = detach(&a.name, self.spec.priority) {
                    result = result.and(Err(e));
                }
            }
        }
        if self.nft {
            let drop_table =
                format!("table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\n");
            if let Err(e) = run_cmd(&["nft", "-f", "-"], Some(&drop_table)) {
                result = result.and(Err(e));
            }
        }
        // Restore in reverse order of change (so `all` comes back before the devices).
        for (path, old) in self.restore.drain(..).rev() {
            if let Err(e) = fs::write(&path, &old) {
                // The TUN's own entries vanish with the device: not an error.
                if e.kind() != io::ErrorKind::NotFound && result.is_ok() {
                    result = Err(io::Error::new(
                        e.kind(),
                        format!("restoring {}: {e}", path.display()),
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
