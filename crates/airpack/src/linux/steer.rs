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

use std::io;

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
    restore: Vec<(String, String)>,
    removed: bool,
}

impl Steering {
    /// Removes leftovers of a previous run with the same spec (table, rules,
    /// routes), then installs the nftables table, rules, routes and sysctls.
    /// On error, whatever was installed is removed again.
    pub fn install(spec: &SteerSpec) -> io::Result<Steering> {
        let _ = spec;
        todo!()
    }

    /// Atomically replaces the nftables class rules (SIGHUP reload with new
    /// `[[class]]` rules). Marks, table, priority and TUN must be unchanged
    /// (else remove and install again).
    pub fn update_matches(&mut self, matches: &[Match]) -> io::Result<()> {
        let _ = matches;
        todo!()
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
    /// (no error if there is none). Does not touch sysctls.
    pub fn cleanup(spec: &SteerSpec) -> io::Result<()> {
        let _ = spec;
        todo!()
    }

    /// The nftables script [`Steering::install`] applies (for logs and tests).
    pub fn nft_script(spec: &SteerSpec) -> io::Result<String> {
        let _ = spec;
        todo!()
    }

    fn remove_inner(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let _ = &self.restore;
        todo!()
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        let _ = self.remove_inner();
    }
}
