//! The gateway's TCP Improvement Module (`gateway.tcp_improvement`, issue
//! 12 point 4) in the daemon's data path.
//!
//! Owns: its steering ([`crate::linux::tim_steer`]: two TUNs, a tcx egress
//! program taking the paced TCP the kernel forwards into the mesh, a tcx
//! ingress program taking the packets of those flows coming back), the core
//! module (`airpack_core::gateway::tim`: local recovery, redundant
//! retransmission drop, queue-aware advertised window, flow table), the
//! per-packet loop (read from a TUN, decide, write back into the TUN of the
//! packet's direction, where the kernel forwards it again: out of the mesh
//! interface through the HTB tree, which still paces it), and its
//! accounting: every packet read is written back, dropped as a redundant
//! retransmission, or counted as a failed write; packets the module creates
//! (local retransmissions, replayed ACKs) are counted apart. One buffer,
//! allocated at start: nothing is allocated per packet.
//!
//! Must not touch: the rate policy (it reads the gateway's current per-flow
//! share), the HTB tree, the observation sockets.

use crate::daemon::config::gateway::TimPlan;
use crate::linux::monotonic_micros;
use crate::linux::steer::Match;
use crate::linux::tim_steer::{TimSteering, TUN_MTU};
use airpack_core::gateway::tim::{Direction, Tim, Verdict};
use airpack_core::Micros;
use anyhow::Context;
use serde_json::{json, Value};
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// Poll token of the "into the mesh" TUN.
pub(super) const TOK_TIM_IN: u64 = 92;
/// Poll token of the "out of the mesh" TUN.
pub(super) const TOK_TIM_OUT: u64 = 93;
/// Packets handled per TUN per wakeup.
const BATCH: usize = 64;

/// Per direction (0: into the mesh, 1: out of it).
#[derive(Clone, Copy, Debug, Default)]
struct Io {
    read: [u64; 2],
    written: [u64; 2],
    write_failed: [u64; 2],
    emitted: [u64; 2],
    emit_failed: [u64; 2],
    read_errors: u64,
}

fn idx(d: Direction) -> usize {
    match d {
        Direction::IntoMesh => 0,
        Direction::FromMesh => 1,
    }
}

/// The module in the data path.
pub(super) struct TimPath {
    steer: TimSteering,
    tim: Tim,
    buf: Vec<u8>,
    io: Io,
}

fn tx_dropped(dev: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/tx_dropped"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

impl TimPath {
    /// Creates the TUNs and attaches the programs to `mesh`.
    pub(super) fn open(
        plan: &TimPlan,
        mesh: &str,
        bypass_mark: u32,
        matches: &[Match],
    ) -> anyhow::Result<TimPath> {
        let ifindex = nix::net::if_::if_nametoindex(mesh)
            .with_context(|| format!("gateway.interface {mesh:?} does not exist"))?;
        let steer = TimSteering::install(&plan.tun, ifindex, bypass_mark, matches)
            .context("steering paced TCP through the daemon (gateway.tcp_improvement)")?;
        Ok(TimPath {
            steer,
            tim: Tim::new(plan.config),
            buf: vec![0; TUN_MTU as usize + 1],
            io: Io::default(),
        })
    }

    /// Descriptors and their poll tokens.
    pub(super) fn fds(&self) -> [(RawFd, u64); 2] {
        [
            (self.steer.tun_in.as_raw_fd(), TOK_TIM_IN),
            (self.steer.tun_out.as_raw_fd(), TOK_TIM_OUT),
        ]
    }

    /// One TUN is readable: handle up to a batch of its packets.
    pub(super) fn read(&mut self, token: u64, share_bps: u64) {
        let dir = if token == TOK_TIM_IN {
            Direction::IntoMesh
        } else {
            Direction::FromMesh
        };
        let now = monotonic_micros();
        let TimPath {
            steer,
            tim,
            buf,
            io: cnt,
        } = self;
        let tun_of = |d: Direction| match d {
            Direction::IntoMesh => &steer.tun_in,
            Direction::FromMesh => &steer.tun_out,
        };
        for _ in 0..BATCH {
            let n = match tun_of(dir).read(buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    cnt.read_errors += 1;
                    return;
                }
            };
            cnt.read[idx(dir)] += 1;
            let emitted = &mut cnt.emitted;
            let emit_failed = &mut cnt.emit_failed;
            let v = tim.on_packet(dir, &mut buf[..n], now, share_bps, |d, p| {
                match tun_of(d).write(p) {
                    Ok(()) => emitted[idx(d)] += 1,
                    Err(_) => emit_failed[idx(d)] += 1,
                }
            });
            if v == Verdict::Forward {
                match tun_of(dir).write(&buf[..n]) {
                    Ok(()) => cnt.written[idx(dir)] += 1,
                    Err(_) => cnt.write_failed[idx(dir)] += 1,
                }
            }
        }
    }

    /// Once per period: forget ended and timed-out flows.
    pub(super) fn tick(&mut self, now: Micros) {
        self.tim.expire(now);
    }

    /// The `gateway.tcp_improvement` object of `airpack stats`.
    pub(super) fn json(&self) -> Value {
        let c = self.tim.counters();
        let f = self.tim.flow_counters();
        let u = c.not_understood;
        let io = &self.io;
        json!({
            "tuns": [self.steer.tun_in.name(), self.steer.tun_out.name()],
            "read": { "into_mesh": io.read[0], "from_mesh": io.read[1] },
            "written": { "into_mesh": io.written[0], "from_mesh": io.written[1] },
            "dropped": {
                "redundant_retransmission": c.dropped_redundant,
                "write_failed": io.write_failed[0] + io.write_failed[1],
            },
            "rewritten": {
                "window": c.windows_rewritten,
                "window_zero": c.windows_zero,
                "hop_limit": c.hops_compensated,
            },
            "generated": {
                "local_retransmission": io.emitted[0],
                "ack_replay": io.emitted[1],
                "write_failed": io.emit_failed[0] + io.emit_failed[1],
            },
            "not_understood": {
                "bad_ip": u.bad_ip,
                "bad_ip_checksum": u.bad_ip_checksum,
                "not_tcp": u.not_tcp,
                "fragment": u.fragment,
                "unsupported_extension": u.unsupported_extension,
                "bad_tcp_header": u.bad_tcp_header,
                "bad_option": u.bad_option,
            },
            "flows_tracked": self.tim.flows(),
            "flows": {
                "created": f.created,
                "ended": f.ended,
                "expired": f.expired,
                "table_full": f.table_full,
            },
            "untracked_packets": f.unknown,
            "signed_acks_untouched": c.signed_untouched,
            "buffered_segments": self.tim.buffered_segments(),
            "memory_bound_bytes": self.tim.memory_bound(),
            "read_errors": io.read_errors,
            // Dropped by the kernel before the daemon read them (the TUNs'
            // queues full): outside the identity, which counts what was read.
            "tun_queue_drops": tx_dropped(self.steer.tun_in.name())
                + tx_dropped(self.steer.tun_out.name()),
        })
    }
}
