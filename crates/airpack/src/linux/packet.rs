//! Observation sockets of the gateway role: `AF_PACKET` sockets bound to one
//! interface, each with a classic BPF filter, so only the packets the
//! daemon wants are copied to it, and none is delayed (a packet socket gets
//! a copy; the packet itself goes on).
//!
//! Owns: the socket (created with protocol 0 so it receives nothing until
//! the filter is attached and it is bound), reading one packet with its
//! direction, the kernel's count of copies it dropped, and the small
//! classic BPF program that selects TCP connection set-up and tear-down
//! ([`tcp_control_filter`]). Voice packets are selected by the steering
//! compiler's program ([`super::cbpf::compile`]) over the voice rules.
//!
//! Must not touch: what the packets mean (the runtime's gateway module).
//!
//! A `SOCK_DGRAM` packet socket hands over the packet from its network
//! header on, in both directions (outgoing copies are taken where the
//! packet is handed to the driver, after the qdisc).

use super::cbpf::Insn;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Bytes of a TCP control packet copied (IPv4 with options or IPv6 with the
/// TCP fixed header).
pub const TCP_SNAP: u32 = 128;

/// An `AF_PACKET`, `SOCK_DGRAM` socket on one interface with a filter.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

/// One packet read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Captured {
    /// Bytes copied into the buffer (at most its length).
    pub len: usize,
    /// The packet's length on the wire (from the network header).
    pub wire_len: usize,
    /// The host sent it (out of the interface) rather than received it.
    pub outgoing: bool,
    /// When the kernel saw it (CLOCK_REALTIME, ns; `SO_TIMESTAMPNS`), if
    /// the kernel said.
    pub kernel_ns: Option<u64>,
}

impl PacketSocket {
    /// Opens the socket on interface `ifindex` with `filter` attached before
    /// any packet can arrive.
    pub fn open(ifindex: u32, filter: &[Insn]) -> io::Result<PacketSocket> {
        if filter.is_empty() || filter.len() > super::cbpf::MAX_INSNS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "filter length out of range",
            ));
        }
        // SAFETY: plain socket(2); the descriptor is owned right after.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut prog: Vec<libc::sock_filter> = filter
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_mut_ptr(),
        };
        // SAFETY: fprog points at `prog`, alive for the call.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&fprog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // Arrival times from the kernel: the daemon may read late.
        let one: libc::c_int = 1;
        // SAFETY: setsockopt with an int.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: zeroed sockaddr_ll is a valid value; fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: bind with a valid sockaddr_ll of the right size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket { fd })
    }

    /// Reads one packet (`WouldBlock` when none is queued).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Captured> {
        // SAFETY: zeroed sockaddr_ll is valid; recvmsg fills it.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        // Room for one SCM_TIMESTAMPNS (a timespec), aligned for cmsghdr.
        let mut control = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: zeroed msghdr is valid; fields set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: every pointer in msg is valid for its length.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut kernel_ns = None;
        // SAFETY: walking the control messages recvmsg wrote, with the libc macros.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    kernel_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let wire_len = n as usize;
        Ok(Captured {
            len: wire_len.min(buf.len()),
            wire_len,
            outgoing: sll.sll_pkttype == libc::PACKET_OUTGOING,
            kernel_ns,
        })
    }

    /// Copies the kernel dropped since the last call (receive queue full).
    pub fn drops(&self) -> u64 {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: getsockopt into a correctly sized struct.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r < 0 {
            0
        } else {
            u64::from(st.tp_drops)
        }
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

// Opcodes (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_B_IND: u16 = 0x50;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const AD_PROTOCOL: u32 = (-0x1000i32) as u32;
const NET: u32 = (-0x100000i32) as u32;

/// A classic BPF program accepting ([`TCP_SNAP`] bytes of) TCP packets with
/// SYN, FIN or RST: unfragmented IPv4 (any header length) and IPv6 whose
/// next header is TCP. Everything else: 0 (not copied). Loads are relative
/// to the network header, so it also runs in [`super::cbpf::run`].
pub fn tcp_control_filter() -> Vec<Insn> {
    vec![
        // 0: A = skb->protocol
        insn(LD_W_ABS, 0, 0, AD_PROTOCOL),
        // 1: IPv4? else 2
        insn(JEQ_K, 0, 8, 0x0800),
        // 2: protocol TCP?
        insn(LD_B_ABS, 0, 0, NET + 9),
        insn(JEQ_K, 0, 12, 6),
        // 4: not a later fragment (offset 0)
        insn(LD_H_ABS, 0, 0, NET + 6),
        insn(JSET_K, 10, 0, 0x1fff),
        // 6: X = IHL * 4; A = TCP flags
        insn(LDX_B_MSH, 0, 0, NET),
        insn(LD_B_IND, 0, 0, NET + 13),
        insn(JSET_K, 6, 7, 0x07),
        // 9: unused slot keeps offsets simple
        insn(JEQ_K, 0, 0, 0),
        // 10: IPv6?
        insn(JEQ_K, 0, 5, 0x86dd),
        // 11: next header TCP?
        insn(LD_B_ABS, 0, 0, NET + 6),
        insn(JEQ_K, 0, 3, 6),
        // 13: TCP flags at 40 + 13
        insn(LD_B_ABS, 0, 0, NET + 53),
        insn(JSET_K, 0, 1, 0x07),
        // 15: accept
        insn(RET_K, 0, 0, TCP_SNAP),
        // 16: reject
        insn(RET_K, 0, 0, 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::cbpf::{check, run, Packet};
    use super::*;

    fn v4_tcp(flags: u8, ihl: u8, frag: u16) -> Vec<u8> {
        let h = usize::from(ihl) * 4;
        let mut p = vec![0u8; h + 20];
        p[0] = 0x40 | ihl;
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[9] = 6;
        p[h + 13] = flags;
        p
    }

    fn v6_tcp(next: u8, flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[0] = 0x60;
        p[6] = next;
        p[53] = flags;
        p
    }

    fn verdict(p: &[u8], proto: u16) -> Option<u32> {
        run(
            &tcp_control_filter(),
            Packet {
                net: p,
                protocol: proto,
                mark: 0,
            },
        )
    }

    #[test]
    fn selects_syn_fin_rst_only() {
        check(&tcp_control_filter()).unwrap();
        for (flags, want) in [
            (0x02, TCP_SNAP),
            (0x12, TCP_SNAP),
            (0x11, TCP_SNAP),
            (0x04, TCP_SNAP),
            (0x10, 0),
            (0x18, 0),
        ] {
            assert_eq!(
                verdict(&v4_tcp(flags, 5, 0), 0x0800),
                Some(want),
                "{flags:#x}"
            );
            assert_eq!(
                verdict(&v6_tcp(6, flags), 0x86dd),
                Some(want),
                "v6 {flags:#x}"
            );
        }
        // IPv4 options are skipped; later fragments and other protocols are not copied.
        assert_eq!(verdict(&v4_tcp(0x02, 8, 0), 0x0800), Some(TCP_SNAP));
        assert_eq!(verdict(&v4_tcp(0x02, 5, 0x0010), 0x0800), Some(0));
        assert_eq!(
            verdict(&v4_tcp(0x02, 5, 0x2000), 0x0800),
            Some(TCP_SNAP),
            "MF, offset 0"
        );
        let mut udp = v4_tcp(0x02, 5, 0);
        udp[9] = 17;
        assert_eq!(verdict(&udp, 0x0800), Some(0));
        assert_eq!(verdict(&v6_tcp(17, 0x02), 0x86dd), Some(0));
        assert_eq!(
            verdict(&v6_tcp(0, 0x02), 0x86dd),
            Some(0),
            "extension header"
        );
        assert_eq!(verdict(&[0u8; 10], 0x0806), Some(0));
        // Truncated: a load past the end rejects.
        assert_eq!(verdict(&v4_tcp(0x02, 5, 0)[..30], 0x0800), Some(0));
    }
}
