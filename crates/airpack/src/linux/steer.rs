//! Kernel steering state: which packets go into the TUN.
//!
//! Owns: the nftables table `inet airpack` (chains `prerouting`, type filter,
//! priority mangle, and `output`, type route, priority mangle) that sets the
//! steering fwmark on packets matching the bundle/opportunistic class rules;
//! the policy-routing rules `fwmark <fwmark> lookup <table> priority <prio>`
//! (IPv4 and IPv6); the routes `default dev <tun> table <table>` (IPv4 and
//! IPv6); and the sysctls that let packets written into the TUN be received
//! (rp_filter off on the TUN and, if strict, for `all`) and forwarded
//! (ip_forward, IPv6 forwarding).
//!
//! Install is idempotent (leftovers of a crashed run are removed first), the
//! nftables part is applied atomically (`nft -f -`), and [`Steering::remove`]
//! or `Drop` remove everything it installed and restore the sysctls it changed.
//!
//! Must not touch: packet contents, peers, the TUN fd (only its name).

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::netns::run_cmd;

/// The nftables table name (family `inet`); one per network namespace.
pub const NFT_TABLE: &str = "airpack";

/// One classifier rule in kernel form. Unset fields match anything. First
/// match wins: a rule with `steer == false` (class `bypass`) stops the chain
/// so the packet is not steered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// `true`: set the steering mark (bundle/opportunistic); `false`: bypass.
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
    /// TUN device name the routes lead into.
    pub tun: String,
    /// Mark set on steered packets (config `fwmark`, e.g. 0x4150). Non-zero.
    pub fwmark: u32,
    /// Mark carried by the daemon's own sockets (config `bypass_mark`); such
    /// packets are never steered. Non-zero, different from `fwmark`.
    pub bypass_mark: u32,
    /// Routing table number (config `route_table`, e.g. 4150).
    pub table: u32,
    /// `ip rule` priority (config `rule_priority`, e.g. 4150; must be > 0 so
    /// the local table, priority 0, still wins).
    pub priority: u32,
    /// Class rules, in order.
    pub matches: Vec<Match>,
    /// Whether packets arriving *from* the TUN (inner packets the daemon
    /// wrote after decoding a bundle) may be steered again when forwarded.
    /// Hop-by-hop: `true` (re-aggregation at every hop). End-to-end: `false`
    /// (the tunnel endpoint forwards them normally).
    pub steer_from_tun: bool,
}

/// Installed steering state; removed by [`Steering::remove`] or on drop.
#[derive(Debug)]
pub struct Steering {
    spec: SteerSpec,
    /// Sysctls changed at install, with their previous values, in change order.
    restore: Vec<(PathBuf, String)>,
    ipv6: bool,
    removed: bool,
}

/// Upper bound on `ip rule del` repetitions when clearing duplicates.
const MAX_RULE_DELETES: usize = 64;

fn ipv6_available() -> bool {
    Path::new("/proc/sys/net/ipv6").exists()
}

fn range(a: u32, b: u32, what: &str) -> io::Result<String> {
    if a > b {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: empty range {a}-{b}"),
        ));
    }
    Ok(if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    })
}

/// The nftables rule bodies (without verdict) for one [`Match`]: usually one,
/// two when `ports` (either direction) or an unversioned `dscp` need an OR.
fn match_conditions(m: &Match) -> io::Result<Vec<String>> {
    let inval = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
    let mut base = Vec::new();
    match m.version {
        None => {}
        Some(4) => base.push("meta nfproto ipv4".to_string()),
        Some(6) => base.push("meta nfproto ipv6".to_string()),
        Some(v) => return Err(inval(format!("version must be 4 or 6, not {v}"))),
    }
    let has_ports = m.ports.is_some() || m.src_ports.is_some() || m.dst_ports.is_some();
    match m.protocol {
        Some(p) => {
            if has_ports && !matches!(p, 6 | 17 | 33 | 132 | 136) {
                return Err(inval(format!(
                    "ports given for protocol {p}, which has none"
                )));
            }
            base.push(format!("meta l4proto {p}"));
        }
        None if has_ports => base.push("meta l4proto { 6, 17, 33, 132, 136 }".to_string()),
        None => {}
    }
    if let Some((a, b)) = m.src_ports {
        base.push(format!(
            "th sport {}",
            range(a.into(), b.into(), "src_ports")?
        ));
    }
    if let Some((a, b)) = m.dst_ports {
        base.push(format!(
            "th dport {}",
            range(a.into(), b.into(), "dst_ports")?
        ));
    }
    if let Some((a, b)) = m.len {
        base.push(format!("meta length {}", range(a.into(), b.into(), "len")?));
    }
    if let Some((value, mask)) = m.mark {
        if value & !mask != 0 {
            return Err(inval(format!(
                "mark value {value:#x} has bits outside mask {mask:#x}"
            )));
        }
        base.push(format!("meta mark and {mask:#x} == {value:#x}"));
    }
    // Alternatives that must be ORed: each yields its own rule.
    let mut alts: Vec<Vec<String>> = vec![Vec::new()];
    if let Some((a, b)) = m.dscp {
        if b > 63 {
            return Err(inval(format!("dscp {b} > 63")));
        }
        let r = range(a.into(), b.into(), "dscp")?;
        alts = match m.version {
            Some(4) => vec![vec![format!("ip dscp {r}")]],
            Some(6) => vec![vec![format!("ip6 dscp {r}")]],
            _ => vec![vec![format!("ip dscp {r}")], vec![format!("ip6 dscp {r}")]],
        };
    }
    if let Some((a, b)) = m.ports {
        let r = range(a.into(), b.into(), "ports")?;
        let mut next = Vec::new();
        for alt in &alts {
            for dir in ["sport", "dport"] {
                let mut v = alt.clone();
                v.push(format!("th {dir} {r}"));
                next.push(v);
            }
        }
        alts = next;
    }
    Ok(alts
        .into_iter()
        .map(|alt| {
            let mut parts = base.clone();
            parts.extend(alt);
            parts.join(" ")
        })
        .collect())
}

fn check_spec(spec: &SteerSpec) -> io::Result<()> {
    let inval = |msg: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, msg.to_string()));
    if spec.fwmark == 0 || spec.bypass_mark == 0 || spec.fwmark == spec.bypass_mark {
        return inval("fwmark and bypass_mark must be non-zero and different");
    }
    if spec.priority == 0 {
        return inval("rule priority must be > 0 (the local table rule is 0)");
    }
    if spec.table == 0 || matches!(spec.table, 253..=255) {
        return inval(
            "route table must not be 0 or a reserved table (253 default, 254 main, 255 local)",
        );
    }
    if spec.tun.is_empty()
        || spec.tun.len() >= 16
        || !spec
            .tun
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return inval("tun name must be 1 to 15 characters of [A-Za-z0-9._-]");
    }
    Ok(())
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

impl Steering {
    /// Removes leftovers of a previous run with the same spec (table, rules,
    /// routes), then installs the nftables table, rules, routes and sysctls.
    /// On error, whatever was installed is removed again. The TUN device
    /// must exist. Runs `nft` and `ip` in the calling thread's namespace.
    pub fn install(spec: &SteerSpec) -> io::Result<Steering> {
        check_spec(spec)?;
        let script = Self::nft_script(spec)?;
        Self::cleanup(spec)?;
        let mut st = Steering {
            spec: spec.clone(),
            restore: Vec::new(),
            ipv6: false,
            removed: false,
        };
        match st.install_inner(&script) {
            Ok(()) => Ok(st),
            Err(e) => {
                let _ = st.remove_inner();
                Err(e)
            }
        }
    }

    fn install_inner(&mut self, script: &str) -> io::Result<()> {
        let spec = &self.spec;
        // Sysctls first: once the rules exist, packets flow into the TUN.
        let tun_rp = sysctl_path(&format!("net.ipv4.conf.{}.rp_filter", spec.tun));
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
                if name != "all" && name != "default" && name != spec.tun.as_str() {
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
        let table = spec.table.to_string();
        let prio = spec.priority.to_string();
        let mark = format!("{:#x}", spec.fwmark);
        let v4_then_v6: &[&str] = if ipv6_available() {
            &["-4", "-6"]
        } else {
            &["-4"]
        };
        for &fam in v4_then_v6 {
            let r = (|| {
                if fam == "-6" {
                    set_sysctl(
                        sysctl_path("net.ipv6.conf.all.forwarding"),
                        "1",
                        &mut self.restore,
                    )?;
                }
                run_cmd(
                    &[
                        "ip", fam, "route", "replace", "default", "dev", &spec.tun, "table", &table,
                    ],
                    None,
                )?;
                run_cmd(
                    &[
                        "ip", fam, "rule", "add", "fwmark", &mark, "lookup", &table, "priority",
                        &prio,
                    ],
                    None,
                )
            })();
            match r {
                Ok(_) => self.ipv6 |= fam == "-6",
                // IPv4 steering is required; without IPv6 (disabled on the
                // TUN, say) marked IPv6 packets just take their normal route.
                Err(e) if fam == "-6" => {
                    tracing::warn!("IPv6 steering not installed, IPv6 is not aggregated: {e}")
                }
                Err(e) => return Err(e),
            }
        }
        // The nftables table last: it is what starts steering.
        run_cmd(&["nft", "-f", "-"], Some(script))?;
        Ok(())
    }

    /// Whether IPv6 steering (rule and route) is installed too.
    pub fn ipv6(&self) -> bool {
        self.ipv6
    }

    /// Atomically replaces the nftables class rules (SIGHUP reload with new
    /// `[[class]]` rules). Marks, table, priority and TUN must be unchanged
    /// (else remove and install again). On error the old rules stay.
    pub fn update_matches(&mut self, matches: &[Match]) -> io::Result<()> {
        let mut spec = self.spec.clone();
        spec.matches = matches.to_vec();
        let script = Self::nft_script(&spec)?;
        run_cmd(&["nft", "-f", "-"], Some(&script))?;
        self.spec = spec;
        Ok(())
    }

    /// The spec this state was installed from.
    pub fn spec(&self) -> &SteerSpec {
        &self.spec
    }

    /// Removes everything and restores changed sysctls. Errors are reported
    /// after every step was tried.
    pub fn remove(mut self) -> io::Result<()> {
        self.remove_inner()
    }

    /// Removes any steering state a previous run with `spec` left behind
    /// (no error if there is none): the nftables table, the `fwmark` rules
    /// (every duplicate) and every route of `spec.table`. Does not touch
    /// sysctls (their old values died with the previous run).
    pub fn cleanup(spec: &SteerSpec) -> io::Result<()> {
        check_spec(spec)?;
        let mut first_err = None;
        // Deleting a table that may not exist, without an error: declare it first.
        let drop_table = format!("table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\n");
        if let Err(e) = run_cmd(&["nft", "-f", "-"], Some(&drop_table)) {
            first_err.get_or_insert(e);
        }
        let table = spec.table.to_string();
        let prio = spec.priority.to_string();
        let mark = format!("{:#x}", spec.fwmark);
        let fams: &[&str] = if ipv6_available() {
            &["-4", "-6"]
        } else {
            &["-4"]
        };
        for fam in fams {
            // `ip rule del` removes one matching rule per call; stop at the first "no such rule".
            for _ in 0..MAX_RULE_DELETES {
                if run_cmd(
                    &[
                        "ip", fam, "rule", "del", "fwmark", &mark, "lookup", &table, "priority",
                        &prio,
                    ],
                    None,
                )
                .is_err()
                {
                    break;
                }
            }
            if let Err(e) = run_cmd(&["ip", fam, "route", "flush", "table", &table], None) {
                // Flushing an empty or missing table is fine; anything else is reported.
                let msg = e.to_string();
                if !msg.contains("FIB table does not exist") && !msg.contains("No such") {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The nftables script [`Steering::install`] applies (for logs and tests):
    /// it replaces table `inet airpack` atomically.
    pub fn nft_script(spec: &SteerSpec) -> io::Result<String> {
        check_spec(spec)?;
        let mut rules = String::new();
        for m in &spec.matches {
            let verdict = if m.steer {
                format!("meta mark set {:#x} return", spec.fwmark)
            } else {
                "return".to_string()
            };
            for cond in match_conditions(m)? {
                if cond.is_empty() {
                    let _ = writeln!(rules, "\t\t{verdict}");
                } else {
                    let _ = writeln!(rules, "\t\t{cond} {verdict}");
                }
            }
        }
        let bypass = format!("\t\tmeta mark {:#x} return\n", spec.bypass_mark);
        let from_tun = if spec.steer_from_tun {
            String::new()
        } else {
            format!("\t\tiifname \"{}\" return\n", spec.tun)
        };
        let mut s = String::new();
        let _ = writeln!(s, "table inet {NFT_TABLE} {{}}");
        let _ = writeln!(s, "delete table inet {NFT_TABLE}");
        let _ = writeln!(s, "table inet {NFT_TABLE} {{");
        let _ = writeln!(s, "\tchain prerouting {{");
        let _ = writeln!(
            s,
            "\t\ttype filter hook prerouting priority mangle; policy accept;"
        );
        s.push_str(&bypass);
        s.push_str(&from_tun);
        s.push_str(&rules);
        let _ = writeln!(s, "\t}}");
        let _ = writeln!(s, "\tchain output {{");
        let _ = writeln!(
            s,
            "\t\ttype route hook output priority mangle; policy accept;"
        );
        s.push_str(&bypass);
        s.push_str(&rules);
        let _ = writeln!(s, "\t}}");
        let _ = writeln!(s, "}}");
        Ok(s)
    }

    fn remove_inner(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let mut result = Self::cleanup(&self.spec);
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
            fwmark: 0x4150,
            bypass_mark: 0x4151,
            table: 4150,
            priority: 4150,
            matches,
            steer_from_tun: true,
        }
    }

    #[test]
    fn script_has_bypass_first_and_one_rule_per_alternative() {
        let m = Match {
            steer: true,
            protocol: Some(17),
            ports: Some((16000, 32000)),
            ..Match::default()
        };
        let by = Match {
            steer: false,
            protocol: Some(17),
            dst_ports: Some((5060, 5060)),
            ..Match::default()
        };
        let s = Steering::nft_script(&spec(vec![by, m])).unwrap();
        let pre: Vec<&str> = s
            .lines()
            .skip_while(|l| !l.contains("chain prerouting"))
            .skip(2)
            .take(4)
            .map(str::trim)
            .collect();
        assert_eq!(
            pre,
            [
                "meta mark 0x4151 return",
                "meta l4proto 17 th dport 5060 return",
                "meta l4proto 17 th sport 16000-32000 meta mark set 0x4150 return",
                "meta l4proto 17 th dport 16000-32000 meta mark set 0x4150 return",
            ]
        );
        assert!(s.contains("type route hook output priority mangle"));
        assert!(!s.contains("iifname"));
        let mut e2e = spec(vec![]);
        e2e.steer_from_tun = false;
        assert!(Steering::nft_script(&e2e)
            .unwrap()
            .contains("iifname \"airpack0\" return"));
    }

    #[test]
    fn conditions_cover_every_field() {
        let m = Match {
            steer: true,
            protocol: None,
            dst_ports: Some((1, 2)),
            src_ports: Some((3, 3)),
            dscp: Some((46, 46)),
            len: Some((0, 300)),
            version: None,
            mark: Some((0x10, 0xff)),
            ports: None,
        };
        let c = match_conditions(&m).unwrap();
        assert_eq!(c.len(), 2);
        assert!(c[0].contains("meta l4proto { 6, 17, 33, 132, 136 }"));
        assert!(c[0].contains("th sport 3") && c[0].contains("th dport 1-2"));
        assert!(c[0].contains("meta length 0-300") && c[0].contains("meta mark and 0xff == 0x10"));
        assert!(c[0].ends_with("ip dscp 46") && c[1].ends_with("ip6 dscp 46"));
        let v6 = Match {
            version: Some(6),
            dscp: Some((40, 47)),
            ..Match::default()
        };
        assert_eq!(
            match_conditions(&v6).unwrap(),
            ["meta nfproto ipv6 ip6 dscp 40-47"]
        );
        assert_eq!(match_conditions(&Match::default()).unwrap(), [""]);
    }

    #[test]
    fn invalid_specs_are_rejected() {
        let bad = |m: Match| Steering::nft_script(&spec(vec![m])).is_err();
        assert!(bad(Match {
            ports: Some((10, 5)),
            ..Match::default()
        }));
        assert!(bad(Match {
            protocol: Some(1),
            ports: Some((1, 5)),
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
            mark: Some((0x100, 0xff)),
            ..Match::default()
        }));
        let mut s = spec(vec![]);
        s.bypass_mark = s.fwmark;
        assert!(Steering::nft_script(&s).is_err());
        let mut s = spec(vec![]);
        s.priority = 0;
        assert!(Steering::nft_script(&s).is_err());
        let mut s = spec(vec![]);
        s.table = 254;
        assert!(Steering::nft_script(&s).is_err());
        let mut s = spec(vec![]);
        s.tun = "a\"; flush ruleset".into();
        assert!(Steering::nft_script(&s).is_err());
    }
}
