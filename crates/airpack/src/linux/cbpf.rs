//! The steering classifier as a classic BPF program (pure: instructions in,
//! no I/O).
//!
//! Owns: the translation of the class rules ([`Match`], first match wins) and
//! the bypass mark into one classic BPF program. The program returns
//! [`STEER`] or 0 (not steered); [`super::ebpf`] translates it mechanically
//! into the eBPF program the kernel runs on each steered interface's tcx
//! egress hook (steer becomes a redirect into the TUN). Also owns [`run`], a
//! small interpreter of the same instruction subset, so tests can check a
//! program against packets without a kernel, and [`bytecode`], tc's text
//! form (for logs).
//!
//! Must not touch: the kernel, interfaces or the TUN (that is [`super::ebpf`]
//! and [`super::steer`]).
//!
//! What the program reads, all relative to the network header (`SKF_NET_OFF`,
//! so the link-layer header of the egress device does not matter): the IP
//! version (from `skb->protocol`), DSCP, IP length (IPv4 total length; IPv6
//! 40 + payload length), the upper-layer protocol (IPv6: after up to
//! [`V6_EXT_HEADERS`] hop-by-hop, routing or destination-options headers),
//! and for TCP, UDP, DCCP, SCTP and UDP-Lite the source and destination
//! ports; `skb->mark` comes from the ancillary load. Never steered: packets
//! carrying exactly the bypass mark (the daemon's own sends), IP fragments
//! (IPv4 MF or offset, IPv6 fragment header: the engine would pass them
//! unchanged anyway), IPv6 packets with more extension headers than the walk
//! follows, and anything that is neither IPv4 nor IPv6. A load beyond the
//! packet ends the program with 0 (kernel semantics), so a truncated header is
//! never steered.

use super::steer::Match;
use std::io;

/// Return value of a program for "steer" (tc: match, use the default class).
pub const STEER: u32 = u32::MAX;
/// IPv6 extension headers (hop-by-hop, routing, destination options) walked
/// before giving up.
pub const V6_EXT_HEADERS: usize = 4;
/// Longest classic BPF program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

// Instruction classes, sizes, modes and operations (linux/filter.h, linux/bpf_common.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const MSH: u16 = 0xa0;
const ADD: u16 = 0x00;
const AND: u16 = 0x50;
const LSH: u16 = 0x60;
const RSH: u16 = 0x70;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGT: u16 = 0x20;
const JGE: u16 = 0x30;
const JSET: u16 = 0x40;
const K: u16 = 0x00;
const X: u16 = 0x08;
const TAX: u16 = 0x00;

/// Ancillary loads: `SKF_AD_OFF + SKF_AD_PROTOCOL` (ntohs(skb->protocol))
/// and `+ SKF_AD_MARK` (skb->mark).
pub(crate) const AD_PROTOCOL: u32 = (-0x1000i32) as u32;
pub(crate) const AD_MARK: u32 = (-0x1000i32 + 20) as u32;
/// Loads relative to the network header: `SKF_NET_OFF + k`.
const NET: u32 = (-0x100000i32) as u32;

// Scratch memory slots (16 words).
const M_MARK: u32 = 0;
const M_VER: u32 = 1;
const M_PROTO: u32 = 2;
const M_DSCP: u32 = 3;
const M_LEN: u32 = 4;
const M_HASPORTS: u32 = 5;
const M_SPORT: u32 = 6;
const M_DPORT: u32 = 7;
const M_NH: u32 = 8;

/// Protocols whose first four bytes are source and destination port.
const PORT_PROTOCOLS: [u8; 5] = [6, 17, 33, 132, 136];

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true (conditional jumps).
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

/// A jump target while assembling.
#[derive(Clone, Copy)]
enum To {
    Next,
    Label(usize),
}

struct Asm {
    code: Vec<(u16, To, To, u32)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn new() -> Asm {
        Asm {
            code: Vec::new(),
            labels: Vec::new(),
        }
    }
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn bind(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }
    fn op(&mut self, code: u16, k: u32) {
        self.code.push((code, To::Next, To::Next, k));
    }
    fn jmp(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.code.push((JMP | code | K, jt, jf, k));
    }
    fn ja(&mut self, to: usize) {
        self.code.push((JMP | JA, To::Label(to), To::Next, 0));
    }
    fn ret(&mut self, k: u32) {
        self.op(RET | K, k);
    }
    fn ld_mem(&mut self, slot: u32) {
        self.op(LD | MEM, slot);
    }
    fn st(&mut self, slot: u32) {
        self.op(ST, slot);
    }
    /// Jumps to `fail` unless `lo <= A <= hi`.
    fn range(&mut self, lo: u32, hi: u32, fail: usize) {
        if lo > 0 {
            self.jmp(JGE, lo, To::Next, To::Label(fail));
        }
        self.jmp(JGT, hi, To::Label(fail), To::Next);
    }

    fn finish(self) -> io::Result<Vec<Insn>> {
        let too_far = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "steering program: jump too far (a class rule is too complex)",
            )
        };
        let mut out = Vec::with_capacity(self.code.len());
        for (i, &(code, jt, jf, k)) in self.code.iter().enumerate() {
            let off = |t: To| -> io::Result<usize> {
                match t {
                    To::Next => Ok(0),
                    To::Label(l) => {
                        let at = self.labels[l].expect("every label is bound");
                        at.checked_sub(i + 1).ok_or_else(too_far)
                    }
                }
            };
            let insn = if code == JMP | JA {
                Insn {
                    code,
                    jt: 0,
                    jf: 0,
                    k: u32::try_from(off(jt)?).map_err(|_| too_far())?,
                }
            } else if code & 0x07 == JMP {
                let t = u8::try_from(off(jt)?).map_err(|_| too_far())?;
                let f = u8::try_from(off(jf)?).map_err(|_| too_far())?;
                Insn {
                    code,
                    jt: t,
                    jf: f,
                    k,
                }
            } else {
                Insn {
                    code,
                    jt: 0,
                    jf: 0,
                    k,
                }
            };
            out.push(insn);
        }
        if out.len() > MAX_INSNS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "steering program has {} instructions, more than the kernel's {MAX_INSNS}: too many class rules",
                    out.len()
                ),
            ));
        }
        check(&out).map_err(|e| io::Error::other(format!("steering program: {e}")))?;
        Ok(out)
    }
}

/// The kernel's structural checks of a classic program (`bpf_check_classic`)
/// for the instructions [`compile`] emits: jumps inside the program, a final
/// return, and no scratch word loaded unless stored on every path to the load
/// (the kernel's `check_load_and_stores`, same algorithm).
pub fn check(prog: &[Insn]) -> Result<(), String> {
    if prog.is_empty() || prog.len() > MAX_INSNS {
        return Err(format!("{} instructions", prog.len()));
    }
    if prog[prog.len() - 1].code & 0x07 != RET {
        return Err("does not end with a return".into());
    }
    let mut masks = vec![u16::MAX; prog.len()];
    let mut valid: u16 = 0;
    for (pc, i) in prog.iter().enumerate() {
        valid &= masks[pc];
        let target = |off: usize| -> Result<usize, String> {
            let t = pc + 1 + off;
            if t < prog.len() {
                Ok(t)
            } else {
                Err(format!("instruction {pc} jumps out of the program"))
            }
        };
        match i.code {
            c if c == ST => valid |= 1 << (i.k & 0xf),
            c if c == LD | MEM && (i.k >= 16 || valid & (1 << i.k) == 0) => {
                return Err(format!(
                    "instruction {pc} loads M[{}] before it is stored",
                    i.k
                ));
            }
            c if c == JMP | JA => {
                masks[target(i.k as usize)?] &= valid;
                valid = u16::MAX;
            }
            c if c & 0x07 == JMP => {
                masks[target(i.jt.into())?] &= valid;
                masks[target(i.jf.into())?] &= valid;
                valid = u16::MAX;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Compiles the class rules into a program (see the module documentation).
pub fn compile(bypass_mark: u32, matches: &[Match]) -> io::Result<Vec<Insn>> {
    let mut a = Asm::new();
    let (v4, v6, l4, rules, no_ports) = (a.label(), a.label(), a.label(), a.label(), a.label());

    // The daemon's own packets are never steered.
    // (Every `ret` below is followed by code the kernel's scratch-memory
    // check reaches with the state at that `ret`, so words are stored early.)
    a.op(LD | W | ABS, AD_MARK);
    a.st(M_MARK);
    let own = a.label();
    a.jmp(JEQ, bypass_mark, To::Label(own), To::Next);
    a.op(LD | W | ABS, AD_PROTOCOL);
    a.jmp(JEQ, 0x0800, To::Label(v4), To::Next);
    a.jmp(JEQ, 0x86dd, To::Label(v6), To::Next);
    a.bind(own);
    a.ret(0);

    // IPv4: fragments are not steered; X = header length.
    a.bind(v4);
    a.op(LD | H | ABS, NET + 6);
    let frag = a.label();
    a.jmp(JSET, 0x3fff, To::Label(frag), To::Next);
    a.op(LD | IMM, 4);
    a.st(M_VER);
    a.op(LD | B | ABS, NET + 1);
    a.op(ALU | RSH | K, 2);
    a.st(M_DSCP);
    a.op(LD | H | ABS, NET + 2);
    a.st(M_LEN);
    a.op(LD | B | ABS, NET + 9);
    a.st(M_PROTO);
    a.op(LDX | B | MSH, NET);
    a.ja(l4);
    a.bind(frag);
    a.ret(0);

    // IPv6: walk a bounded number of extension headers; X = upper-layer offset.
    a.bind(v6);
    a.op(LD | IMM, 6);
    a.st(M_VER);
    a.op(LD | H | ABS, NET);
    a.op(ALU | RSH | K, 6);
    a.op(ALU | AND | K, 0x3f);
    a.st(M_DSCP);
    a.op(LD | H | ABS, NET + 4);
    a.op(ALU | ADD | K, 40);
    a.st(M_LEN);
    a.op(LDX | W | IMM, 40);
    a.op(LD | B | ABS, NET + 6);
    let (v6_done, v6_drop) = (a.label(), a.label());
    for _ in 0..V6_EXT_HEADERS {
        let ext = a.label();
        a.jmp(JEQ, 44, To::Label(v6_drop), To::Next);
        a.jmp(JEQ, 0, To::Label(ext), To::Next);
        a.jmp(JEQ, 43, To::Label(ext), To::Next);
        a.jmp(JEQ, 60, To::Label(ext), To::Label(v6_done));
        a.bind(ext);
        // nh = P[X]; X += (P[X + 1] + 1) * 8; A = nh
        a.op(LD | B | IND, NET);
        a.st(M_NH);
        a.op(LD | B | IND, NET + 1);
        a.op(ALU | ADD | K, 1);
        a.op(ALU | LSH | K, 3);
        a.op(ALU | ADD | X, 0);
        a.op(MISC | TAX, 0);
        a.ld_mem(M_NH);
    }
    // Still an extension header (or a fragment header) after the walk: not steered.
    a.jmp(JEQ, 44, To::Label(v6_drop), To::Next);
    a.jmp(JEQ, 0, To::Label(v6_drop), To::Next);
    a.jmp(JEQ, 43, To::Label(v6_drop), To::Next);
    a.jmp(JEQ, 60, To::Label(v6_drop), To::Label(v6_done));
    a.bind(v6_drop);
    a.ret(0);
    a.bind(v6_done);

    // Upper layer (A = protocol, X = its offset): ports where the protocol has them.
    a.bind(l4);
    a.st(M_PROTO);
    let ports = a.label();
    for (i, p) in PORT_PROTOCOLS.iter().enumerate() {
        let miss = if i + 1 == PORT_PROTOCOLS.len() {
            To::Label(no_ports)
        } else {
            To::Next
        };
        a.jmp(JEQ, u32::from(*p), To::Label(ports), miss);
    }
    a.bind(ports);
    a.op(LD | H | IND, NET);
    a.st(M_SPORT);
    a.op(LD | H | IND, NET + 2);
    a.st(M_DPORT);
    a.op(LD | IMM, 1);
    a.st(M_HASPORTS);
    a.ja(rules);
    a.bind(no_ports);
    a.op(LD | IMM, 0);
    a.st(M_HASPORTS);
    // The kernel refuses loads of scratch words not stored on every path.
    a.st(M_SPORT);
    a.st(M_DPORT);

    // The rules, first match wins; each block falls through to the next on a miss.
    a.bind(rules);
    for m in matches {
        let next = a.label();
        if let Some(v) = m.version {
            a.ld_mem(M_VER);
            a.jmp(JEQ, u32::from(v), To::Next, To::Label(next));
        }
        if let Some(p) = m.protocol {
            a.ld_mem(M_PROTO);
            a.jmp(JEQ, u32::from(p), To::Next, To::Label(next));
        }
        if m.ports.is_some() || m.src_ports.is_some() || m.dst_ports.is_some() {
            a.ld_mem(M_HASPORTS);
            a.jmp(JEQ, 1, To::Next, To::Label(next));
        }
        if let Some((lo, hi)) = m.src_ports {
            a.ld_mem(M_SPORT);
            a.range(lo.into(), hi.into(), next);
        }
        if let Some((lo, hi)) = m.dst_ports {
            a.ld_mem(M_DPORT);
            a.range(lo.into(), hi.into(), next);
        }
        if let Some((lo, hi)) = m.ports {
            let (try_dst, ok) = (a.label(), a.label());
            a.ld_mem(M_SPORT);
            a.range(lo.into(), hi.into(), try_dst);
            a.ja(ok);
            a.bind(try_dst);
            a.ld_mem(M_DPORT);
            a.range(lo.into(), hi.into(), next);
            a.bind(ok);
        }
        if let Some((lo, hi)) = m.dscp {
            a.ld_mem(M_DSCP);
            a.range(lo.into(), hi.into(), next);
        }
        if let Some((lo, hi)) = m.len {
            a.ld_mem(M_LEN);
            a.range(lo.into(), hi.into(), next);
        }
        if let Some((value, mask)) = m.mark {
            a.ld_mem(M_MARK);
            a.op(ALU | AND | K, mask);
            a.jmp(JEQ, value, To::Next, To::Label(next));
        }
        a.ret(if m.steer { STEER } else { 0 });
        a.bind(next);
    }
    a.ret(0);
    a.finish()
}

/// The program in tc's `bytecode` syntax: `N,code jt jf k,...`.
pub fn bytecode(prog: &[Insn]) -> String {
    let mut s = prog.len().to_string();
    for i in prog {
        s.push_str(&format!(",{} {} {} {}", i.code, i.jt, i.jf, i.k));
    }
    s
}

/// What a program sees of a packet in [`run`].
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// The packet from its network header on.
    pub net: &'a [u8],
    /// `skb->protocol` in host order (0x0800, 0x86dd).
    pub protocol: u16,
    /// `skb->mark`.
    pub mark: u32,
}

/// Runs `prog` on `pkt` like the kernel (for tests): the return value, 0 when
/// a load falls outside the packet. `None` for an instruction outside the
/// subset [`compile`] emits or a jump out of the program.
pub fn run(prog: &[Insn], pkt: Packet<'_>) -> Option<u32> {
    let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
    let load = |off: u32, size: usize| -> Option<u32> {
        let k = off.wrapping_sub(NET) as usize;
        if off < NET || k > 0xFFFF {
            return None;
        }
        let b = pkt.net.get(k..k + size)?;
        Some(b.iter().fold(0u32, |v, &x| v << 8 | u32::from(x)))
    };
    let mut pc = 0usize;
    // Jumps only go forward, so the program ends within prog.len() steps.
    for _ in 0..=prog.len() {
        let i = *prog.get(pc)?;
        pc += 1;
        let size = match i.code & 0x18 {
            W => 4,
            H => 2,
            _ => 1,
        };
        match i.code {
            c if c == LD | W | ABS && i.k == AD_MARK => a = pkt.mark,
            c if c == LD | W | ABS && i.k == AD_PROTOCOL => a = u32::from(pkt.protocol),
            c if c & 0xe7 == LD | ABS => match load(i.k, size) {
                Some(v) => a = v,
                None => return Some(0),
            },
            c if c & 0xe7 == LD | IND => match load(i.k.wrapping_add(x), size) {
                Some(v) => a = v,
                None => return Some(0),
            },
            c if c == LD | IMM => a = i.k,
            c if c == LDX | W | IMM => x = i.k,
            c if c == LD | MEM => a = *mem.get(i.k as usize)?,
            c if c == ST => *mem.get_mut(i.k as usize)? = a,
            c if c == LDX | B | MSH => match load(i.k, 1) {
                Some(v) => x = (v & 0xf) * 4,
                None => return Some(0),
            },
            c if c == ALU | ADD | K => a = a.wrapping_add(i.k),
            c if c == ALU | ADD | X => a = a.wrapping_add(x),
            c if c == ALU | AND | K => a &= i.k,
            c if c == ALU | LSH | K => a = a.checked_shl(i.k).unwrap_or(0),
            c if c == ALU | RSH | K => a = a.checked_shr(i.k).unwrap_or(0),
            c if c == MISC | TAX => x = a,
            c if c == JMP | JA => pc += i.k as usize,
            c if c & 0x07 == JMP => {
                let taken = match c & 0xf0 {
                    JEQ => a == i.k,
                    JGT => a > i.k,
                    JGE => a >= i.k,
                    JSET => a & i.k != 0,
                    _ => return None,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            c if c == RET | K => return Some(i.k),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rules' meaning, written directly: what the program must compute.
    fn reference(bypass: u32, matches: &[Match], pkt: Packet<'_>) -> bool {
        if pkt.mark == bypass {
            return false;
        }
        let p = pkt.net;
        let be16 = |o: usize| p.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let (version, dscp, len, mut proto, mut off) = match pkt.protocol {
            0x0800 => {
                let Some(frag) = be16(6) else { return false };
                if frag & 0x3fff != 0 || p.len() < 10 {
                    return false;
                }
                let Some(len) = be16(2) else { return false };
                (
                    4u8,
                    p[1] >> 2,
                    u32::from(len),
                    p[9],
                    usize::from(p[0] & 0xf) * 4,
                )
            }
            0x86dd => {
                let (Some(h), Some(pl)) = (be16(0), be16(4)) else {
                    return false;
                };
                let Some(&nh) = p.get(6) else { return false };
                (
                    (6),
                    ((h >> 6) & 0x3f) as u8,
                    u32::from(pl) + 40,
                    nh,
                    40usize,
                )
            }
            _ => return false,
        };
        if version == 6 {
            let mut walked = 0;
            while matches!(proto, 0 | 43 | 60) {
                if walked == V6_EXT_HEADERS {
                    return false;
                }
                let (Some(&nh), Some(&l)) = (p.get(off), p.get(off + 1)) else {
                    return false;
                };
                proto = nh;
                off += (usize::from(l) + 1) * 8;
                walked += 1;
            }
            if proto == 44 {
                return false;
            }
        }
        let ports = if PORT_PROTOCOLS.contains(&proto) {
            let (Some(s), Some(d)) = (be16(off), be16(off + 2)) else {
                return false;
            };
            Some((s, d))
        } else {
            None
        };
        let within = |v: u32, r: (u32, u32)| r.0 <= v && v <= r.1;
        let w16 = |r: (u16, u16)| (u32::from(r.0), u32::from(r.1));
        for m in matches {
            let hit = m.version.map_or(true, |v| v == version)
                && m.protocol.map_or(true, |x| x == proto)
                && m.src_ports.map_or(true, |r| {
                    ports.is_some_and(|(s, _)| within(s.into(), w16(r)))
                })
                && m.dst_ports.map_or(true, |r| {
                    ports.is_some_and(|(_, d)| within(d.into(), w16(r)))
                })
                && m.ports.map_or(true, |r| {
                    ports.is_some_and(|(s, d)| within(s.into(), w16(r)) || within(d.into(), w16(r)))
                })
                && m.dscp
                    .map_or(true, |(lo, hi)| within(dscp.into(), (lo.into(), hi.into())))
                && m.len.map_or(true, |r| within(len, w16(r)))
                && m.mark.map_or(true, |(v, mask)| pkt.mark & mask == v);
            if hit {
                return m.steer;
            }
        }
        false
    }

    fn v4(proto: u8, sport: u16, dport: u16, dscp: u8, ihl: u8, frag: u16) -> Vec<u8> {
        let hl = usize::from(ihl) * 4;
        let mut p = vec![0u8; hl + 12];
        let len = p.len() as u16;
        p[0] = 0x40 | ihl;
        p[1] = dscp << 2;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[hl..hl + 2].copy_from_slice(&sport.to_be_bytes());
        p[hl + 2..hl + 4].copy_from_slice(&dport.to_be_bytes());
        p
    }

    fn v6(exts: &[u8], proto: u8, sport: u16, dport: u16, dscp: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        let tc = u32::from(dscp) << 2;
        p[0..4].copy_from_slice(&(6u32 << 28 | tc << 20).to_be_bytes());
        p[6] = exts.first().copied().unwrap_or(proto);
        for (i, _) in exts.iter().enumerate() {
            let next = exts.get(i + 1).copied().unwrap_or(proto);
            // An 8-byte extension header (length field 0), or 16 bytes for routing.
            let l = if exts[i] == 43 { 1u8 } else { 0 };
            p.push(next);
            p.push(l);
            p.resize(p.len() + 6 + 8 * usize::from(l), 0);
        }
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0; 8]);
        let pl = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&pl.to_be_bytes());
        p
    }

    fn voice() -> Vec<Match> {
        vec![
            Match {
                steer: false,
                protocol: Some(17),
                dst_ports: Some((5060, 5060)),
                ..Match::default()
            },
            Match {
                steer: true,
                protocol: Some(17),
                ports: Some((16000, 32000)),
                ..Match::default()
            },
        ]
    }

    fn steer(prog: &[Insn], net: &[u8], protocol: u16, mark: u32) -> bool {
        run(
            prog,
            Packet {
                net,
                protocol,
                mark,
            },
        )
        .expect("valid program")
            == STEER
    }

    #[test]
    fn voice_class_by_either_port_bypass_class_and_mark() {
        let prog = compile(0x4151, &voice()).unwrap();
        let p = v4(17, 40000, 16000, 46, 5, 0);
        assert!(steer(&prog, &p, 0x0800, 0));
        assert!(
            steer(&prog, &v4(17, 20000, 9, 0, 5, 0), 0x0800, 0),
            "source port"
        );
        assert!(
            !steer(&prog, &p, 0x0800, 0x4151),
            "the daemon's own packets"
        );
        assert!(
            steer(&prog, &p, 0x0800, 0x4150),
            "other marks do not matter"
        );
        assert!(
            !steer(&prog, &v4(17, 20000, 5060, 0, 5, 0), 0x0800, 0),
            "bypass rule first"
        );
        assert!(
            !steer(&prog, &v4(6, 20000, 20000, 0, 5, 0), 0x0800, 0),
            "TCP"
        );
        assert!(
            !steer(&prog, &v4(17, 1, 32001, 0, 5, 0), 0x0800, 0),
            "out of range"
        );
        assert!(
            steer(&prog, &v4(17, 1, 20000, 0, 15, 0), 0x0800, 0),
            "IP options"
        );
        assert!(
            !steer(&prog, &v4(17, 1, 20000, 0, 5, 0x2000), 0x0800, 0),
            "MF"
        );
        assert!(
            !steer(&prog, &v4(17, 1, 20000, 0, 5, 0x0010), 0x0800, 0),
            "offset"
        );
        assert!(
            !steer(&prog, &p[..22], 0x0800, 0),
            "truncated: no destination port"
        );
        assert!(!steer(&prog, &p, 0x0806, 0), "not IP");
        assert!(steer(&prog, &v6(&[], 17, 1, 20000, 46), 0x86dd, 0));
        assert!(steer(&prog, &v6(&[0, 43, 60], 17, 1, 20000, 46), 0x86dd, 0));
        assert!(
            !steer(&prog, &v6(&[0, 44], 17, 1, 20000, 46), 0x86dd, 0),
            "fragment"
        );
        assert!(
            !steer(&prog, &v6(&[60; 5], 17, 1, 20000, 46), 0x86dd, 0),
            "too many"
        );
        assert!(
            steer(&prog, &v6(&[60; 4], 17, 1, 20000, 46), 0x86dd, 0),
            "four walked"
        );
    }

    #[test]
    fn memory_check_catches_a_load_before_a_store_on_some_path() {
        let bad = [
            Insn {
                code: LD | IMM,
                jt: 0,
                jf: 0,
                k: 1,
            },
            Insn {
                code: JMP | JEQ | K,
                jt: 1,
                jf: 0,
                k: 1,
            },
            Insn {
                code: ST,
                jt: 0,
                jf: 0,
                k: 3,
            },
            Insn {
                code: LD | MEM,
                jt: 0,
                jf: 0,
                k: 3,
            },
            Insn {
                code: RET | K,
                jt: 0,
                jf: 0,
                k: 0,
            },
        ];
        assert!(check(&bad).is_err());
        let mut good = bad;
        good[1].jt = 0;
        assert!(check(&good).is_ok());
        assert!(check(&bad[..4]).is_err(), "must end with a return");
    }

    #[test]
    fn empty_rules_steer_nothing_and_bytecode_is_tc_syntax() {
        let prog = compile(1, &[]).unwrap();
        assert!(!steer(&prog, &v4(17, 1, 2, 0, 5, 0), 0x0800, 0));
        let bc = bytecode(&prog);
        assert!(bc.starts_with(&format!("{},32 0 0 {}", prog.len(), AD_MARK)));
        assert_eq!(bc.split(',').count(), prog.len() + 1);
    }

    #[test]
    fn too_many_rules_are_refused() {
        let m = Match {
            steer: true,
            protocol: Some(17),
            ports: Some((1, 2)),
            dscp: Some((1, 2)),
            ..Match::default()
        };
        assert!(compile(1, &vec![m; 400]).is_err());
    }

    fn arb_match() -> impl Strategy<Value = Match> {
        let range16 =
            || proptest::option::of((0u16..40, 0u16..40).prop_map(|(a, b)| (a.min(b), a.max(b))));
        (
            any::<bool>(),
            proptest::option::of(prop_oneof![Just(4u8), Just(6u8)]),
            proptest::option::of(prop_oneof![Just(17u8), Just(6), Just(1), Just(58)]),
            (range16(), range16(), range16()),
            proptest::option::of((0u8..64, 0u8..64).prop_map(|(a, b)| (a.min(b), a.max(b)))),
            proptest::option::of((0u16..200, 0u16..200).prop_map(|(a, b)| (a.min(b), a.max(b)))),
            proptest::option::of((0u32..4, prop_oneof![Just(3u32), Just(1)])),
        )
            .prop_map(
                |(steer, version, protocol, (ports, src_ports, dst_ports), dscp, len, mark)| {
                    let ported = matches!(protocol, Some(6 | 17));
                    Match {
                        steer,
                        version,
                        protocol,
                        ports: ports.filter(|_| ported),
                        src_ports: src_ports.filter(|_| ported),
                        dst_ports: dst_ports.filter(|_| ported),
                        dscp,
                        len,
                        mark: mark.map(|(v, m)| (v & m, m)),
                    }
                },
            )
    }

    fn arb_packet() -> impl Strategy<Value = (Vec<u8>, u16)> {
        let v4p = (
            prop_oneof![Just(17u8), Just(6), Just(1)],
            0u16..40,
            0u16..40,
            0u8..64,
            5u8..8,
            prop_oneof![Just(0u16), Just(0x4000), Just(0x2000), Just(1)],
            0usize..80,
        )
            .prop_map(|(pr, s, d, ds, ihl, fr, pad)| {
                let mut p = v4(pr, s, d, ds, ihl, fr);
                p.resize(p.len() + pad, 0);
                let l = p.len() as u16;
                p[2..4].copy_from_slice(&l.to_be_bytes());
                (p, 0x0800)
            });
        let v6p = (
            proptest::collection::vec(prop_oneof![Just(0u8), Just(43), Just(60), Just(44)], 0..6),
            prop_oneof![Just(17u8), Just(6), Just(58)],
            0u16..40,
            0u16..40,
            0u8..64,
        )
            .prop_map(|(e, pr, s, d, ds)| (v6(&e, pr, s, d, ds), 0x86dd));
        (prop_oneof![v4p, v6p], 0usize..8).prop_map(|((mut p, pr), cut)| {
            // Sometimes truncated, as a hostile or broken packet would be.
            if cut == 0 {
                let n = p.len() / 2;
                p.truncate(n);
            }
            (p, pr)
        })
    }

    proptest! {
        #[test]
        fn program_agrees_with_the_rules(
            matches in proptest::collection::vec(arb_match(), 0..6),
            (net, protocol) in arb_packet(),
            mark in prop_oneof![Just(0u32), Just(1), Just(2), Just(3), Just(0x4151)],
        ) {
            let prog = compile(0x4151, &matches).unwrap();
            let got = run(&prog, Packet { net: &net, protocol, mark }).expect("valid program");
            prop_assert!(got == 0 || got == STEER);
            prop_assert_eq!(got == STEER, reference(0x4151, &matches, Packet { net: &net, protocol, mark }));
        }
    }
}
