//! The steering classifier as an eBPF `sched_cls` program on a tcx egress
//! link, through the raw `bpf(2)` system call (no libbpf).
//!
//! Owns: the mechanical translation of the classic program of [`super::cbpf`]
//! (the class rules, proptested against their meaning) into eBPF
//! ([`translate`], pure), loading it ([`Program`], the verifier's log in the
//! error), attaching it to an interface's egress with a tcx link ([`Link`]),
//! running it in the kernel on a test frame ([`Program::test_run`]) and
//! listing what is attached to an egress ([`tcx_egress_programs`]).
//!
//! Why tcx links: the link exists only as long as its file descriptor. The
//! daemon holds it and never pins it, so when the process dies (SIGKILL, OOM
//! kill, panic) the kernel detaches the program: no filter outlives the
//! daemon to redirect packets into a TUN device that no longer exists, and
//! no qdisc is added or deleted (that drops packets in flight).
//!
//! Must not touch: tc qdiscs or filters, the TUN (only its ifindex),
//! sysctls (that is [`super::steer`]).
//!
//! Translation: A is R0, X is R7, the context (`struct __sk_buff *`) stays in
//! R6 (`LD_ABS`/`LD_IND` need it there), the 16 scratch words are 16 stack
//! slots, the ancillary loads become `__sk_buff` field loads (`protocol` is
//! kept in network byte order there: converted), conditional jumps become
//! 32-bit compares (JMP32) plus a `JA` for the false branch, "steer" becomes
//! `bpf_redirect(tun, 0)` (returns `TC_ACT_REDIRECT`; for an L3 TUN the kernel
//! pulls the link-layer header) and "not steered" returns `TCX_NEXT`, so
//! programs attached after ours still run. One difference to the classic
//! program under a tc filter: a load beyond the packet ends an eBPF program
//! with R0 = 0, which is `TCX_PASS` here: the packet leaves normally,
//! unsteered (a classic filter would have reported "no match" and the next
//! filter would have run).

use super::cbpf::{self, Insn};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `TC_ACT_REDIRECT`: the program's return value for a steered packet.
pub const TC_ACT_REDIRECT: i32 = 7;
/// `TCX_NEXT`: not steered, the next program (or the qdisc) decides.
pub const TCX_NEXT: i32 = -1;
/// `TCX_PASS`: what a failed packet load returns (packet leaves normally).
pub const TCX_PASS: i32 = 0;
/// Name the kernel shows for our program (`bpf_prog_info.name`).
pub const PROG_NAME: &str = "airpack_steer";

// bpf(2) commands (linux/bpf.h `enum bpf_cmd`).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_LINK_UPDATE: libc::c_long = 29;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;
const BPF_FUNC_REDIRECT: i32 = 23;
/// `struct __sk_buff` offsets.
const SKB_MARK: i16 = 8;
const SKB_PROTOCOL: i16 = 16;

// eBPF opcodes (linux/bpf.h, linux/bpf_common.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
const SIZE_W: u8 = 0x00;
const SIZE_H: u8 = 0x08;
const SIZE_B: u8 = 0x10;
const ABS: u8 = 0x20;
const IND: u8 = 0x40;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const RSH: u8 = 0x70;
const MOV: u8 = 0xb0;
const END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JGT: u8 = 0x20;
const JGE: u8 = 0x30;
const JNE: u8 = 0x50;
const JLT: u8 = 0xa0;
const JLE: u8 = 0xb0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const R10: u8 = 10;

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EInsn {
    /// Opcode.
    pub code: u8,
    /// Destination register.
    pub dst: u8,
    /// Source register.
    pub src: u8,
    /// Jump offset or memory offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl EInsn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> EInsn {
        EInsn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }
    /// The instruction's bytes as the kernel reads them (`struct bpf_insn`:
    /// the register nibbles are bitfields, whose order follows the byte order).
    fn raw(self) -> [u8; 8] {
        let regs = if cfg!(target_endian = "little") {
            (self.src & 0xf) << 4 | (self.dst & 0xf)
        } else {
            (self.dst & 0xf) << 4 | (self.src & 0xf)
        };
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

/// Stack offset of scratch word `k` (16 words below the frame pointer).
fn slot(k: u32) -> i16 {
    -64 + 4 * (k & 0xf) as i16
}

/// A translated instruction before jump offsets are known.
enum Out {
    I(EInsn),
    /// A jump (`code`, compare immediate) to the classic instruction `target`.
    Jmp(u8, i32, usize),
}

/// Translates a classic program of the subset [`cbpf::compile`] emits into
/// eBPF that redirects steered packets to `tun_ifindex` (see the module
/// documentation). Errors on an instruction outside the subset.
pub fn translate(prog: &[Insn], tun_ifindex: u32) -> io::Result<Vec<EInsn>> {
    let bad = |pc: usize, i: &Insn| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "steering program: classic instruction {pc} ({:#x}) has no eBPF translation",
                i.code
            ),
        )
    };
    let e = EInsn::new;
    // Prologue: ctx in R6, A = X = 0 (classic registers start at zero).
    let mut out: Vec<Vec<Out>> = Vec::with_capacity(prog.len() + 1);
    out.push(vec![
        Out::I(e(ALU64 | MOV | X, R6, R1, 0, 0)),
        Out::I(e(ALU | MOV | K, R0, 0, 0, 0)),
        Out::I(e(ALU | MOV | K, R7, 0, 0, 0)),
    ]);
    let live = reachable(prog);
    for (pc, i) in prog.iter().enumerate() {
        if !live[pc] {
            // The verifier refuses unreachable code (the classic checker did not).
            out.push(Vec::new());
            continue;
        }
        let k = i.k as i32;
        let c = i.code;
        let size = |c: u16| match c & 0x18 {
            0x00 => SIZE_W,
            0x08 => SIZE_H,
            _ => SIZE_B,
        };
        let to = |off: usize| pc + 1 + off;
        let v: Vec<Out> = match c {
            // Ancillary loads: skb->mark, ntohs(skb->protocol).
            0x20 if i.k == cbpf::AD_MARK => {
                vec![Out::I(e(LDX | MEM | SIZE_W, R0, R6, SKB_MARK, 0))]
            }
            0x20 if i.k == cbpf::AD_PROTOCOL => vec![
                Out::I(e(LDX | MEM | SIZE_W, R0, R6, SKB_PROTOCOL, 0)),
                Out::I(e(ALU | END | TO_BE, R0, 0, 0, 16)),
            ],
            // LD|{W,H,B}|ABS: packet loads (SKF_NET_OFF-relative offsets).
            0x20 | 0x28 | 0x30 => vec![Out::I(e(LD | ABS | size(c), 0, 0, 0, k))],
            0x40 | 0x48 | 0x50 => vec![Out::I(e(LD | IND | size(c), 0, R7, 0, k))],
            0x00 => vec![Out::I(e(ALU | MOV | K, R0, 0, 0, k))],
            0x01 => vec![Out::I(e(ALU | MOV | K, R7, 0, 0, k))],
            0x60 => vec![Out::I(e(LDX | MEM | SIZE_W, R0, R10, slot(i.k), 0))],
            0x02 => vec![Out::I(e(STX | MEM | SIZE_W, R10, R0, slot(i.k), 0))],
            // X = 4 * (P[k] & 0xf), A preserved (LD_ABS clobbers R0-R5).
            0xb1 => vec![
                Out::I(e(ALU64 | MOV | X, R8, R0, 0, 0)),
                Out::I(e(LD | ABS | SIZE_B, 0, 0, 0, k)),
                Out::I(e(ALU | AND | K, R0, 0, 0, 0xf)),
                Out::I(e(ALU | LSH | K, R0, 0, 0, 2)),
                Out::I(e(ALU64 | MOV | X, R7, R0, 0, 0)),
                Out::I(e(ALU64 | MOV | X, R0, R8, 0, 0)),
            ],
            0x04 => vec![Out::I(e(ALU | ADD | K, R0, 0, 0, k))],
            0x0c => vec![Out::I(e(ALU | ADD | X, R0, R7, 0, 0))],
            0x54 => vec![Out::I(e(ALU | AND | K, R0, 0, 0, k))],
            0x64 | 0x74 if i.k >= 32 => vec![Out::I(e(ALU | MOV | K, R0, 0, 0, 0))],
            0x64 => vec![Out::I(e(ALU | LSH | K, R0, 0, 0, k))],
            0x74 => vec![Out::I(e(ALU | RSH | K, R0, 0, 0, k))],
            0x07 => vec![Out::I(e(ALU64 | MOV | X, R7, R0, 0, 0))],
            0x05 => vec![Out::Jmp(JMP | JA, 0, to(i.k as usize))],
            0x15 | 0x25 | 0x35 | 0x45 => {
                let op = (c & 0xf0) as u8;
                let (t, f) = (to(i.jt.into()), to(i.jf.into()));
                let inverse = match op {
                    JEQ => Some(JNE),
                    JGT => Some(JLE),
                    JGE => Some(JLT),
                    _ => None,
                };
                match (i.jt, i.jf, inverse) {
                    (_, 0, _) => vec![Out::Jmp(JMP32 | op | K, k, t)],
                    (0, _, Some(inv)) => vec![Out::Jmp(JMP32 | inv | K, k, f)],
                    _ => vec![Out::Jmp(JMP32 | op | K, k, t), Out::Jmp(JMP | JA, 0, f)],
                }
            }
            0x06 if i.k == 0 => vec![
                Out::I(e(ALU64 | MOV | K, R0, 0, 0, TCX_NEXT)),
                Out::I(e(JMP | EXIT, 0, 0, 0, 0)),
            ],
            0x06 => vec![
                Out::I(e(ALU | MOV | K, R1, 0, 0, tun_ifindex as i32)),
                Out::I(e(ALU | MOV | K, R2, 0, 0, 0)),
                Out::I(e(JMP | CALL, 0, 0, 0, BPF_FUNC_REDIRECT)),
                Out::I(e(JMP | EXIT, 0, 0, 0, 0)),
            ],
            _ => return Err(bad(pc, i)),
        };
        out.push(v);
    }
    // Where each classic instruction starts in the output (index 0: prologue).
    let mut start = Vec::with_capacity(out.len() + 1);
    let mut n = 0usize;
    for v in &out {
        start.push(n);
        n += v.len();
    }
    start.push(n);
    let mut prog_out = Vec::with_capacity(n);
    for v in out {
        for o in v {
            let here = prog_out.len();
            prog_out.push(match o {
                Out::I(i) => i,
                Out::Jmp(code, imm, target) => {
                    // Classic instruction `target` is output block `target + 1`.
                    let at = *start
                        .get(target + 1)
                        .filter(|_| target < prog.len())
                        .ok_or_else(|| {
                            io::Error::new(
                                io::ErrorKind::InvalidInput,
                                "steering program: jump out of the program",
                            )
                        })?;
                    let off = i16::try_from(at as i64 - here as i64 - 1).map_err(|_| {
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "steering program: jump too far",
                        )
                    })?;
                    e(code, R0, 0, off, imm)
                }
            });
        }
    }
    Ok(prog_out)
}

/// Which classic instructions some path from the first one reaches (jumps
/// only go forward, so one pass in order suffices).
fn reachable(prog: &[Insn]) -> Vec<bool> {
    let mut live = vec![false; prog.len()];
    let mark = |live: &mut Vec<bool>, t: usize| {
        if let Some(l) = live.get_mut(t) {
            *l = true;
        }
    };
    mark(&mut live, 0);
    for pc in 0..prog.len() {
        if !live[pc] {
            continue;
        }
        let i = prog[pc];
        match (i.code & 0x07, i.code) {
            (0x06, _) => {}
            (0x05, 0x05) => mark(&mut live, pc + 1 + i.k as usize),
            (0x05, _) => {
                mark(&mut live, pc + 1 + usize::from(i.jt));
                mark(&mut live, pc + 1 + usize::from(i.jf));
            }
            _ => mark(&mut live, pc + 1),
        }
    }
    live
}

fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> io::Result<i64> {
    // SAFETY: `attr` is a zero-initialised, 8-byte aligned `union bpf_attr`
    // prefix of the given size whose pointer fields point to live buffers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        // c_long: i64 here, i32 on 32-bit targets (armv7, mips).
        #[allow(clippy::useless_conversion)]
        Ok(i64::from(r))
    }
}

/// Writes a u32 at byte offset `at` of an attribute buffer.
fn put32(attr: &mut [u64], at: usize, v: u32) {
    let word = &mut attr[at / 8];
    let shift = if cfg!(target_endian = "little") {
        (at % 8) * 8
    } else {
        32 - (at % 8) * 8
    };
    *word = (*word & !(0xffff_ffffu64 << shift)) | u64::from(v) << shift;
}

fn get32(attr: &[u64], at: usize) -> u32 {
    let shift = if cfg!(target_endian = "little") {
        (at % 8) * 8
    } else {
        32 - (at % 8) * 8
    };
    (attr[at / 8] >> shift) as u32
}

fn fd_from(r: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this new descriptor to us.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

/// A loaded program (closed, and freed by the kernel once unused, on drop).
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads `insns` as a `sched_cls` program named [`PROG_NAME`]. On a
    /// verifier rejection the error carries the verifier's log.
    pub fn load(insns: &[EInsn]) -> io::Result<Program> {
        let raw: Vec<[u8; 8]> = insns.iter().map(|i| i.raw()).collect();
        let license = b"Dual MIT/GPL\0";
        let mut log = vec![0u8; 1 << 20];
        let mut attr = [0u64; 16];
        let mut try_load = |log_level: u32, log: &mut [u8]| {
            attr.fill(0);
            put32(&mut attr, 0, BPF_PROG_TYPE_SCHED_CLS);
            put32(&mut attr, 4, raw.len() as u32);
            attr[1] = raw.as_ptr() as u64;
            attr[2] = license.as_ptr() as u64;
            if log_level > 0 {
                put32(&mut attr, 24, log_level);
                put32(&mut attr, 28, log.len() as u32);
                attr[4] = log.as_mut_ptr() as u64;
            }
            let mut name = [0u8; 16];
            name[..PROG_NAME.len()].copy_from_slice(PROG_NAME.as_bytes());
            for (j, chunk) in name.chunks(8).enumerate() {
                attr[6 + j] = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
            }
            bpf(BPF_PROG_LOAD, &mut attr)
        };
        match try_load(0, &mut log) {
            Ok(fd) => Ok(Program { fd: fd_from(fd) }),
            Err(e) => {
                // Again with the verifier's log, for the error message.
                let again = try_load(1, &mut log);
                if let Ok(fd) = again {
                    return Ok(Program { fd: fd_from(fd) });
                }
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                let tail: Vec<&str> = text.lines().rev().take(12).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                Err(io::Error::new(
                    e.kind(),
                    format!(
                        "loading the eBPF steering program ({} instructions): {e}{}{}",
                        insns.len(),
                        if tail.is_empty() { "" } else { "; verifier: " },
                        tail.join(" | ")
                    ),
                ))
            }
        }
    }

    /// Opens the program with this kernel id (for inspection).
    pub fn from_id(id: u32) -> io::Result<Program> {
        let mut attr = [0u64; 2];
        put32(&mut attr, 0, id);
        bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).map(|fd| Program { fd: fd_from(fd) })
    }

    /// The program's name as the kernel keeps it.
    pub fn name(&self) -> io::Result<String> {
        let mut info = [0u64; 12]; // struct bpf_prog_info up to and including `name`
        let mut attr = [0u64; 2];
        put32(&mut attr, 0, self.fd.as_raw_fd() as u32);
        put32(&mut attr, 4, std::mem::size_of_val(&info) as u32);
        attr[1] = info.as_mut_ptr() as u64;
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
        let bytes: Vec<u8> = info[8..10].iter().flat_map(|w| w.to_ne_bytes()).collect();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }

    /// Runs the program once in the kernel (`BPF_PROG_TEST_RUN`) on an
    /// Ethernet `frame` (at least 14 bytes; the kernel sets `skb->protocol`
    /// from its EtherType) carrying `mark`; returns the program's return value.
    pub fn test_run(&self, frame: &[u8], mark: u32) -> io::Result<i32> {
        // struct __sk_buff up to `mark`: len and pkt_type must stay zero.
        let mut ctx = [0u32; 3];
        ctx[2] = mark;
        let mut attr = [0u64; 10];
        put32(&mut attr, 0, self.fd.as_raw_fd() as u32);
        put32(&mut attr, 8, frame.len() as u32);
        attr[2] = frame.as_ptr() as u64;
        put32(&mut attr, 32, 1);
        put32(&mut attr, 40, std::mem::size_of_val(&ctx) as u32);
        attr[6] = ctx.as_ptr() as u64;
        bpf(BPF_PROG_TEST_RUN, &mut attr)?;
        Ok(get32(&attr, 4) as i32)
    }
}

impl AsRawFd for Program {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A tcx egress attachment: the program runs on every packet the interface
/// sends for as long as this link's descriptor is open (closing it, or the
/// process ending, detaches the program).
#[derive(Debug)]
pub struct Link {
    fd: OwnedFd,
}

impl Link {
    /// Attaches `prog` to the egress of interface `ifindex` (after any
    /// program already there). EINVAL/EOPNOTSUPP mean the kernel has no tcx
    /// (Linux older than 6.6).
    pub fn tcx_egress(prog: &Program, ifindex: u32) -> io::Result<Link> {
        let mut attr = [0u64; 4];
        put32(&mut attr, 0, prog.fd.as_raw_fd() as u32);
        put32(&mut attr, 4, ifindex);
        put32(&mut attr, 8, BPF_TCX_EGRESS);
        bpf(BPF_LINK_CREATE, &mut attr).map(|fd| Link { fd: fd_from(fd) })
    }

    /// Attaches `prog` to the ingress of interface `ifindex` (after any
    /// program already there); as [`Link::tcx_egress`] otherwise.
    pub fn tcx_ingress(prog: &Program, ifindex: u32) -> io::Result<Link> {
        let mut attr = [0u64; 4];
        put32(&mut attr, 0, prog.fd.as_raw_fd() as u32);
        put32(&mut attr, 4, ifindex);
        put32(&mut attr, 8, BPF_TCX_INGRESS);
        bpf(BPF_LINK_CREATE, &mut attr).map(|fd| Link { fd: fd_from(fd) })
    }

    /// Replaces the attached program atomically (no packet sees no program).
    pub fn update(&self, prog: &Program) -> io::Result<()> {
        let mut attr = [0u64; 2];
        put32(&mut attr, 0, self.fd.as_raw_fd() as u32);
        put32(&mut attr, 4, prog.fd.as_raw_fd() as u32);
        bpf(BPF_LINK_UPDATE, &mut attr).map(|_| ())
    }
}

/// Ids of the programs attached to the tcx egress of `ifindex` in the calling
/// thread's network namespace, in run order (empty when there are none).
pub fn tcx_egress_programs(ifindex: u32) -> io::Result<Vec<u32>> {
    let mut ids = [0u32; 64];
    let mut attr = [0u64; 8];
    put32(&mut attr, 0, ifindex);
    put32(&mut attr, 4, BPF_TCX_EGRESS);
    attr[2] = ids.as_mut_ptr() as u64;
    put32(&mut attr, 24, ids.len() as u32);
    bpf(BPF_PROG_QUERY, &mut attr)?;
    let n = (get32(&attr, 24) as usize).min(ids.len());
    Ok(ids[..n].to_vec())
}

/// Compiles the rules and translates them for `tun_ifindex`, then loads the program.
pub fn load_steering(
    bypass_mark: u32,
    matches: &[super::steer::Match],
    tun_ifindex: u32,
) -> io::Result<Program> {
    let classic = cbpf::compile(bypass_mark, matches)?;
    Program::load(&translate(&classic, tun_ifindex)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::steer::Match;

    #[test]
    fn jumps_land_on_the_translated_targets() {
        let voice = [Match {
            steer: true,
            protocol: Some(17),
            ports: Some((16000, 32000)),
            ..Match::default()
        }];
        let classic = cbpf::compile(0x4151, &voice).unwrap();
        let e = translate(&classic, 9).unwrap();
        assert_eq!(e[0], EInsn::new(ALU64 | MOV | X, R6, R1, 0, 0));
        // Every jump lands inside the program; it ends with exit.
        for (pc, i) in e.iter().enumerate() {
            let class = i.code & 0x07;
            if (class == JMP || class == JMP32) && i.code & 0xf0 != CALL && i.code & 0xf0 != EXIT {
                let t = pc as i64 + 1 + i64::from(i.off);
                assert!(t > pc as i64 && (t as usize) < e.len(), "{pc}: {i:?}");
            }
        }
        assert_eq!(e.last().unwrap().code, JMP | EXIT);
        // The redirect goes to the TUN's ifindex.
        let call = e.iter().position(|i| i.code == JMP | CALL).unwrap();
        assert_eq!(e[call - 2], EInsn::new(ALU | MOV | K, R1, 0, 0, 9));
        assert_eq!(e[call].imm, BPF_FUNC_REDIRECT);
    }

    #[test]
    fn attribute_words_are_laid_out_like_the_kernel_union() {
        let mut a = [0u64; 2];
        put32(&mut a, 4, 0xdead_beef);
        put32(&mut a, 8, 7);
        assert_eq!(get32(&a, 4), 0xdead_beef);
        assert_eq!(get32(&a, 0), 0);
        assert_eq!(get32(&a, 8), 7);
        let bytes: Vec<u8> = a.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[4..8], &0xdead_beefu32.to_ne_bytes());
    }
}
