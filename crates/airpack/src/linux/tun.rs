//! The TUN device the steering routes lead into.
//!
//! Owns: opening `/dev/net/tun` (IFF_TUN | IFF_NO_PI, nonblocking, close-on-exec),
//! setting the MTU and bringing the link up, and reading/writing whole IP packets.
//! The device exists as long as the [`Tun`] lives (it is not persistent), so a
//! crashed daemon leaves no TUN behind.
//!
//! Must not touch: routes, rules, nftables (see [`super::steer`]) or packet contents.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_size};

/// `struct ifreq` with the union viewed as raw bytes (40 bytes on every Linux ABI we build for).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct IfReq {
    pub(crate) name: [u8; libc::IFNAMSIZ],
    pub(crate) data: [u8; 24],
}

impl IfReq {
    pub(crate) fn new(name: &str) -> io::Result<IfReq> {
        let bytes = name.as_bytes();
        if bytes.is_empty()
            || bytes.len() >= libc::IFNAMSIZ
            || bytes.contains(&0)
            || bytes.contains(&b'/')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid interface name {name:?} (1 to 15 bytes, no '/' or NUL)"),
            ));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: [0; 24],
        };
        req.name[..bytes.len()].copy_from_slice(bytes);
        Ok(req)
    }

    fn set_short(&mut self, v: i16) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }

    fn short(&self) -> i16 {
        i16::from_ne_bytes([self.data[0], self.data[1]])
    }

    fn set_int(&mut self, v: i32) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }

    fn name_string(&self) -> String {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.name.len());
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

/// A datagram socket used only as a handle for interface ioctls.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before wrapping.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd is a freshly created, owned descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets the MTU of interface `name`.
pub fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    set_int(name, libc::SIOCSIFMTU as libc::Ioctl, mtu)
}

/// Sets the transmit queue length of interface `name` (for the TUN: how many
/// steered packets the kernel queues for the daemon before dropping; the
/// TUN default is 500).
pub fn set_txqueuelen(name: &str, len: u32) -> io::Result<()> {
    set_int(name, libc::SIOCSIFTXQLEN as libc::Ioctl, len)
}

/// An interface ioctl that reads one int from a struct ifreq (`request`:
/// SIOCSIFMTU, SIOCSIFTXQLEN); values above `i32::MAX` are EINVAL.
fn set_int(name: &str, request: libc::Ioctl, value: u32) -> io::Result<()> {
    let sock = ioctl_socket()?;
    let mut req = IfReq::new(name)?;
    req.set_int(i32::try_from(value).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?);
    // SAFETY: both requests read a struct ifreq; `req` is one and outlives the call.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), request, &mut req) })?;
    Ok(())
}

/// The transmit queue length of interface `name`.
pub fn txqueuelen(name: &str) -> io::Result<u32> {
    let sock = ioctl_socket()?;
    let mut req = IfReq::new(name)?;
    // SAFETY: SIOCGIFTXQLEN fills a struct ifreq we own.
    cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFTXQLEN as libc::Ioctl,
            &mut req,
        )
    })?;
    Ok(i32::from_ne_bytes([req.data[0], req.data[1], req.data[2], req.data[3]]).max(0) as u32)
}

/// Brings interface `name` administratively up (`true`) or down (`false`).
pub fn set_link_up(name: &str, up: bool) -> io::Result<()> {
    let sock = ioctl_socket()?;
    let mut req = IfReq::new(name)?;
    // SAFETY: SIOCGIFFLAGS fills the flags of a struct ifreq we own.
    cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS as libc::Ioctl,
            &mut req,
        )
    })?;
    let mut flags = req.short();
    if up {
        flags |= libc::IFF_UP as i16;
    } else {
        flags &= !(libc::IFF_UP as i16);
    }
    req.set_short(flags);
    // SAFETY: SIOCSIFFLAGS reads a struct ifreq we own.
    cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFFLAGS as libc::Ioctl,
            &mut req,
        )
    })?;
    Ok(())
}

/// Whether interface `name` is up and running (IFF_UP and IFF_RUNNING, i.e.
/// administratively up with carrier); `Ok(None)` if there is no such interface.
pub fn link_up(name: &str) -> io::Result<Option<bool>> {
    let sock = ioctl_socket()?;
    let mut req = IfReq::new(name)?;
    // SAFETY: SIOCGIFFLAGS fills the flags of a struct ifreq we own.
    match cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS as libc::Ioctl,
            &mut req,
        )
    }) {
        Ok(_) => {
            let f = req.short() as i32;
            Ok(Some(f & libc::IFF_UP != 0 && f & libc::IFF_RUNNING != 0))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The name of the interface with index `index` (ENXIO/ENODEV if there is none).
pub fn ifname(index: u32) -> io::Result<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf holds IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Ok(name.to_string_lossy().into_owned())
}

/// The kernel interface index of `name` (ENODEV if there is none).
pub fn ifindex(name: &str) -> io::Result<u32> {
    let req = IfReq::new(name)?;
    // SAFETY: req.name is NUL-terminated (IfReq::new keeps the last byte 0).
    let cname = CStr::from_bytes_until_nul(&req.name)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: cname is a valid C string.
    let idx = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// EBUSY retries of TUNSETIFF, 10 ms apart (1 s in all).
const TUNSETIFF_RETRIES: u32 = 100;

/// An open TUN device (layer 3, no packet-information header, nonblocking).
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    ifindex: u32,
}

impl Tun {
    /// Creates (or attaches to) TUN device `name` (a `%d` pattern such as
    /// `"ap%d"` lets the kernel choose), sets `mtu`, brings it up.
    ///
    /// Errors: EBUSY if another process holds the device (after retrying
    /// for up to 1 s, in case a previous holder's device is still going away), EPERM without
    /// CAP_NET_ADMIN, ENOENT if `/dev/net/tun` is missing.
    pub fn open(name: &str, mtu: u32) -> io::Result<Tun> {
        let mut req = IfReq::new(name)?;
        // SAFETY: open(2) with a static NUL-terminated path.
        let fd = cvt(unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: fd was just opened and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        req.set_short((libc::IFF_TUN | libc::IFF_NO_PI) as i16);
        // A device of the same name closed a moment ago (a restart, a crashed
        // run) may still be unregistering: EBUSY for a few milliseconds. Retry,
        // bounded; a device held by a live process stays EBUSY and fails.
        let mut tries = 0;
        loop {
            let mut attempt = req;
            // SAFETY: TUNSETIFF reads and updates (the name) a struct ifreq we own.
            match cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut attempt) }) {
                Ok(_) => {
                    req = attempt;
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < TUNSETIFF_RETRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
        let name = req.name_string();
        set_mtu(&name, mtu)?;
        set_link_up(&name, true)?;
        let ifindex = ifindex(&name)?;
        Ok(Tun { fd, name, ifindex })
    }

    /// The device's name (as chosen by the kernel if a `%d` pattern was given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device's interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Reads one IP packet into `buf`; `WouldBlock` when none is queued.
    /// A packet longer than `buf` is truncated (size `buf` to MTU or more).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is a valid writable region of buf.len() bytes.
        cvt_size(unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
    }

    /// Reads up to `max` packets, handing each to `f`, reusing `buf`; stops
    /// early when the queue is empty. Returns how many packets were read. An
    /// error other than `WouldBlock` is returned only if no packet was read
    /// (otherwise it is left for the next call to report).
    pub fn read_batch<F: FnMut(&[u8])>(
        &self,
        buf: &mut [u8],
        max: usize,
        mut f: F,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.read(buf) {
                Ok(len) => {
                    n += 1;
                    f(&buf[..len]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || n > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Writes one whole IPv4 or IPv6 packet (the kernel reads the version
    /// nibble; anything else is rejected with EINVAL).
    pub fn write(&self, pkt: &[u8]) -> io::Result<()> {
        // SAFETY: pkt is a valid readable region of pkt.len() bytes.
        let n =
            cvt_size(unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) })?;
        if n != pkt.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short write to TUN",
            ));
        }
        Ok(())
    }
}

/// Writes batches of packets into a TUN, and reads batches out of it, with
/// one system call per batch (io_uring), or with one `write`/`read` each where
/// io_uring is not available (old kernel, `kernel.io_uring_disabled`, a
/// seccomp filter). Each write or read is still one packet taking the
/// kernel's normal path; the batch only saves the per-packet system call,
/// which dominates on small packets.
pub struct TunBatch {
    ring: Option<io_uring::IoUring>,
    /// The TUN descriptor registered with the ring (a fixed file: no
    /// descriptor lookup per write).
    fd: RawFd,
    /// Submitted, not yet completed.
    inflight: usize,
    /// Reads go through the ring too (false once the TUN refused `RWF_NOWAIT`).
    uring_reads: bool,
}

impl std::fmt::Debug for TunBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunBatch")
            .field("io_uring", &self.ring.is_some())
            .finish()
    }
}

/// Submission queue entries of a [`TunBatch`] (the completion queue is twice as large).
const BATCH_ENTRIES: u32 = 256;
/// Bound on retries of an interrupted or busy `io_uring_enter`.
const ENTER_RETRIES: usize = 1_000;

impl TunBatch {
    /// A batch writer into `tun`; `io_uring = false` (or io_uring being
    /// unavailable) writes one packet per system call.
    pub fn new(tun: &Tun, io_uring: bool) -> TunBatch {
        let fd = tun.as_raw_fd();
        let ring = if io_uring {
            io_uring::IoUring::new(BATCH_ENTRIES)
                .ok()
                .filter(|r| r.submitter().register_files(&[fd]).is_ok())
        } else {
            None
        };
        TunBatch {
            ring,
            fd,
            inflight: 0,
            uring_reads: true,
        }
    }

    /// Whether batches go through io_uring.
    pub fn uses_io_uring(&self) -> bool {
        self.ring.is_some()
    }

    /// Whether batched reads go through io_uring (false once the TUN refused
    /// `RWF_NOWAIT` on an older kernel: plain reads then).
    pub fn reads_use_io_uring(&self) -> bool {
        self.ring.is_some() && self.uring_reads
    }

    /// Writes every packet of `packets` into `tun` (the device given to
    /// [`TunBatch::new`]), calling `done` with each write's result (in
    /// completion order, which need not be `packets`' order). Returns only
    /// when every write has completed, so the packets' memory is no longer
    /// referenced by the kernel.
    pub fn write<'p>(
        &mut self,
        tun: &Tun,
        packets: impl IntoIterator<Item = &'p [u8]>,
        mut done: impl FnMut(io::Result<()>),
    ) {
        if self.ring.is_none() {
            for p in packets {
                done(tun.write(p));
            }
            return;
        }
        debug_assert_eq!(tun.as_raw_fd(), self.fd, "the TUN given to TunBatch::new");
        let fd = io_uring::types::Fixed(0);
        for p in packets {
            let ring = self.ring.as_mut().expect("checked above");
            if ring.submission().is_full() {
                self.complete_all(&mut done);
            }
            let Some(ring) = self.ring.as_mut() else {
                // The ring failed and was given up: plain writes from here on.
                done(tun.write(p));
                continue;
            };
            let len = u32::try_from(p.len()).unwrap_or(u32::MAX);
            let sqe = io_uring::opcode::Write::new(fd, p.as_ptr(), len)
                .build()
                .user_data(u64::from(len));
            // SAFETY: `p` borrows memory the caller keeps alive for this whole
            // call, and `complete_all` reaps every completion before it
            // returns, so the kernel never reads the buffer after that.
            let pushed = unsafe { ring.submission().push(&sqe) };
            if pushed.is_ok() {
                self.inflight += 1;
            } else {
                done(tun.write(p));
            }
        }
        self.complete_all(&mut done);
    }

    /// Reads up to `bufs.len()` packets from `tun` (the device given to
    /// [`TunBatch::new`]) with one system call: read `i` goes into `bufs[i]`
    /// and its result into `res[i]` (the packet's length, or a negative errno:
    /// `-EAGAIN` when the queue was empty by then). The reads run in order,
    /// inline (`RWF_NOWAIT`: an empty queue completes at once), so
    /// the packets read keep the TUN's order. Without io_uring, plain reads,
    /// stopping at the first that fails (later entries get `-EAGAIN`).
    /// Returns how many reads got a packet. Every read has completed when it
    /// returns: the kernel references none of `bufs` afterwards.
    pub fn read(&mut self, tun: &Tun, bufs: &mut [Vec<u8>], res: &mut [i32]) -> usize {
        let k = bufs.len().min(res.len());
        res[..k].fill(-libc::EAGAIN);
        if self.ring.is_some() && self.uring_reads && k > 1 {
            debug_assert_eq!(tun.as_raw_fd(), self.fd, "the TUN given to TunBatch::new");
            debug_assert_eq!(self.inflight, 0);
            if let Some(n) = self.read_uring(&mut bufs[..k], &mut res[..k]) {
                return n;
            }
            // A kernel whose TUN refuses RWF_NOWAIT: nothing was read; plain
            // reads from now on.
            self.uring_reads = false;
            res[..k].fill(-libc::EAGAIN);
        }
        // One read at a time (no io_uring, a single read, or the ring failed).
        let mut n = 0;
        for (b, r) in bufs[..k].iter_mut().zip(res[..k].iter_mut()) {
            match tun.read(b) {
                Ok(len) => {
                    *r = i32::try_from(len).unwrap_or(i32::MAX);
                    n += 1;
                }
                Err(e) => {
                    *r = -e.raw_os_error().unwrap_or(libc::EIO);
                    break;
                }
            }
        }
        n
    }

    /// [`TunBatch::read`] through the ring (`None`: no ring, or the TUN
    /// refused `RWF_NOWAIT`, so nothing was read).
    fn read_uring(&mut self, bufs: &mut [Vec<u8>], res: &mut [i32]) -> Option<usize> {
        let ring = self.ring.as_mut()?;
        let fd = io_uring::types::Fixed(0);
        let mut pushed = 0;
        for (i, b) in bufs.iter_mut().enumerate() {
            let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
            // RWF_NOWAIT: an empty queue completes with -EAGAIN at once (a
            // read on a non-blocking file alone would wait for a packet).
            let sqe = io_uring::opcode::Read::new(fd, b.as_mut_ptr(), len)
                .rw_flags(libc::RWF_NOWAIT)
                .build()
                .user_data(i as u64);
            // SAFETY: `b` is exclusively borrowed for this whole call and every
            // read is reaped below before returning (or the ring is dropped,
            // which waits for in-flight requests), so the kernel never writes
            // into it afterwards.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                break;
            }
            pushed += 1;
        }
        let mut left = pushed;
        let mut n = 0;
        let mut tries = 0;
        while left > 0 {
            if let Err(e) = ring.submit_and_wait(left) {
                let retry = matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                );
                tries += 1;
                if !retry || tries > ENTER_RETRIES {
                    // Never seen with a valid ring. Take what completed, then
                    // drop the ring (closing it cancels and waits for the
                    // rest); later calls read plainly.
                    n += Self::reap_reads(ring, res, &mut left);
                    self.ring = None;
                    return Some(n);
                }
            }
            n += Self::reap_reads(ring, res, &mut left);
        }
        let refused = |r: i32| r == -libc::EOPNOTSUPP || r == -libc::EINVAL;
        if n == 0 && res.first().copied().is_some_and(refused) {
            return None;
        }
        Some(n)
    }

    /// Takes the completed reads' results into `res`; returns how many got a packet.
    fn reap_reads(ring: &mut io_uring::IoUring, res: &mut [i32], left: &mut usize) -> usize {
        let mut n = 0;
        for c in ring.completion() {
            *left = left.saturating_sub(1);
            if let Some(r) = res.get_mut(c.user_data() as usize) {
                *r = c.result();
                n += usize::from(c.result() >= 0);
            }
        }
        n
    }

    /// Submits what is queued and reaps every completion.
    fn complete_all(&mut self, done: &mut impl FnMut(io::Result<()>)) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let mut tries = 0;
        while self.inflight > 0 {
            if let Err(e) = ring.submit_and_wait(self.inflight) {
                let retry = matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                );
                tries += 1;
                if !retry || tries > ENTER_RETRIES {
                    // Never seen with a valid ring. Give io_uring up: what has
                    // not completed counts as failed, later batches use plain
                    // writes. (The kernel only reads these buffers.)
                    for _ in 0..self.inflight {
                        done(Err(io::Error::new(e.kind(), format!("io_uring: {e}"))));
                    }
                    self.inflight = 0;
                    self.ring = None;
                    return;
                }
            }
            for c in ring.completion() {
                self.inflight -= 1;
                let r = c.result();
                done(if r < 0 {
                    Err(io::Error::from_raw_os_error(-r))
                } else if r as u64 != c.user_data() {
                    Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "short write to TUN",
                    ))
                } else {
                    Ok(())
                });
            }
        }
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(IfReq::new("").is_err());
        assert!(IfReq::new("0123456789abcdef").is_err());
        assert!(IfReq::new("a/b").is_err());
        let r = IfReq::new("airpack0").unwrap();
        assert_eq!(r.name_string(), "airpack0");
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }
}
