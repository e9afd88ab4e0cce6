//! Steering of the gateway's paced TCP through the daemon (the TCP
//! Improvement Module, `gateway.tcp_improvement`): two TUN devices and two
//! tcx links on the mesh interface.
//!
//! Owns, on the mesh interface only:
//! - an **egress** program: TCP the `[[gateway.tcp]]` rules pace, that the
//!   kernel *forwarded* out of the mesh interface, is redirected into the
//!   "into the mesh" TUN (`<tcp_tun>i`). Packets the daemon wrote back into
//!   either TUN (`skb->ingress_ifindex` is that TUN) and packets the host
//!   sent itself (`ingress_ifindex` 0) pass on to the qdisc, so the kernel's
//!   HTB tree still paces what the daemon writes back and nothing loops;
//! - an **ingress** program: the same rules with source and destination
//!   ports swapped (the ACKs of the paced flows come the other way; a
//!   `len` condition is dropped, it describes data packets) redirect into
//!   the "out of the mesh" TUN (`<tcp_tun>o`) before the kernel routes them.
//!
//! Two devices because a TUN read carries no direction and the module needs
//! it. The programs are the class-rule programs of [`super::cbpf`]
//! translated by [`super::ebpf`] (the bypass mark is honoured), the egress
//! one behind a three-instruction guard.
//!
//! Fail-safe exactly as [`super::steer`]: the links and the TUN devices live
//! as long as this process's descriptors; if the daemon dies, the kernel
//! detaches both programs and removes both TUNs, and TCP is forwarded as
//! before (paced by the HTB tree if that is still there, unimproved). No
//! state is left for `airpack cleanup`. Must not touch: packet contents,
//! the HTB tree, the aggregation's steering.

use super::cbpf;
use super::ebpf::{self, EInsn, Link, Program, TCX_NEXT};
use super::steer::Match;
use super::tun::Tun;
use std::io;

/// `struct __sk_buff` offset of `ingress_ifindex`.
const SKB_INGRESS_IFINDEX: i16 = 36;

/// The guard in front of the egress program: pass (`TCX_NEXT`) what came
/// from either TUN or from the host itself.
pub fn egress_guard(tun_in: u32, tun_out: u32) -> [EInsn; 7] {
    const LDX_W: u8 = 0x01 | 0x60; // LDX | MEM | W
    const JEQ32_K: u8 = 0x06 | 0x10;
    const JA: u8 = 0x05;
    const MOV64_K: u8 = 0x07 | 0xb0;
    const EXIT: u8 = 0x05 | 0x90;
    let e = |code, dst, src, off, imm| EInsn {
        code,
        dst,
        src,
        off,
        imm,
    };
    [
        e(LDX_W, 2, 1, SKB_INGRESS_IFINDEX, 0),
        e(JEQ32_K, 2, 0, 3, tun_in as i32),
        e(JEQ32_K, 2, 0, 2, tun_out as i32),
        e(JEQ32_K, 2, 0, 1, 0),
        e(JA, 0, 0, 2, 0),
        e(MOV64_K, 0, 0, 0, TCX_NEXT),
        e(EXIT, 0, 0, 0, 0),
    ]
}

/// The rules as they match the ACKs (ports swapped, length dropped).
pub fn reversed(matches: &[Match]) -> Vec<Match> {
    matches
        .iter()
        .map(|m| Match {
            src_ports: m.dst_ports,
            dst_ports: m.src_ports,
            len: None,
            ..m.clone()
        })
        .collect()
}

/// The two TUNs and the two links.
#[derive(Debug)]
pub struct TimSteering {
    /// Packets into the mesh (read from the egress redirect, written back).
    pub tun_in: Tun,
    /// Packets out of the mesh (the ACKs).
    pub tun_out: Tun,
    _egress: Link,
    _ingress: Link,
}

/// MTU of the TUNs: whatever the kernel hands over fits (segmentation
/// offload is undone before a TUN without offloads, to the sender's MSS).
pub const TUN_MTU: u32 = 65_535;

fn sysctl(key: &str, value: &str) -> io::Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
}

impl TimSteering {
    /// Creates the TUNs `<base>i` and `<base>o` (reverse-path filter off on
    /// them: what the daemon writes has the sources of other interfaces),
    /// loads both programs and attaches them to `mesh_ifindex`, the egress
    /// one first. Call after the aggregation's steering is installed (it
    /// may make every existing interface's reverse-path filter strict).
    pub fn install(
        base: &str,
        mesh_ifindex: u32,
        bypass_mark: u32,
        matches: &[Match],
    ) -> io::Result<TimSteering> {
        let tun_in = Tun::open(&format!("{base}i"), TUN_MTU)?;
        let tun_out = Tun::open(&format!("{base}o"), TUN_MTU)?;
        for t in [&tun_in, &tun_out] {
            sysctl(&format!("net.ipv4.conf.{}.rp_filter", t.name()), "0")?;
        }
        let mut egress: Vec<EInsn> = egress_guard(tun_in.ifindex(), tun_out.ifindex()).to_vec();
        egress.extend(ebpf::translate(
            &cbpf::compile(bypass_mark, matches)?,
            tun_in.ifindex(),
        )?);
        let egress = Program::load(&egress)?;
        let ingress = ebpf::load_steering(bypass_mark, &reversed(matches), tun_out.ifindex())?;
        let attach = |r: io::Result<Link>, what: &str| {
            r.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("attaching the TCP improvement program to the {what} of the mesh interface: {e} (needs Linux 6.6 or later, tcx)"),
                )
            })
        };
        let _egress = attach(Link::tcx_egress(&egress, mesh_ifindex), "egress")?;
        let _ingress = attach(Link::tcx_ingress(&ingress, mesh_ifindex), "ingress")?;
        Ok(TimSteering {
            tun_in,
            tun_out,
            _egress,
            _ingress,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_jumps_to_the_pass_exit_or_past_it() {
        let g = egress_guard(7, 8);
        // Each compare's target is the MOV r0, TCX_NEXT at index 5.
        for (pc, i) in g.iter().enumerate().take(4).skip(1) {
            assert_eq!(pc as i16 + 1 + i.off, 5, "{pc}");
        }
        assert_eq!((g[1].imm, g[2].imm, g[3].imm), (7, 8, 0));
        assert_eq!(4 + 1 + g[4].off, 7, "the rules start after the guard");
        assert_eq!(g[5].imm, TCX_NEXT);
    }

    #[test]
    fn ack_rules_swap_the_ports_and_drop_the_length() {
        let m = Match {
            steer: true,
            protocol: Some(6),
            src_ports: Some((80, 80)),
            dst_ports: Some((1024, 65535)),
            ports: Some((1, 2)),
            len: Some((100, 1500)),
            ..Match::default()
        };
        let r = &reversed(&[m])[0];
        assert_eq!(
            (r.src_ports, r.dst_ports, r.ports, r.len, r.protocol),
            (
                Some((1024, 65535)),
                Some((80, 80)),
                Some((1, 2)),
                None,
                Some(6)
            )
        );
    }
}
