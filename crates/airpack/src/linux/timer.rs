//! Microsecond timers and signal delivery as file descriptors.
//!
//! Owns: [`Timer`] (timerfd on CLOCK_MONOTONIC, absolute deadlines in µs),
//! [`monotonic_micros`] (the daemon's clock, same base as the timer), the
//! calling thread's timer slack and real-time priority, and
//! [`Signals`] (signalfd for SIGTERM, SIGINT, SIGHUP, which it blocks).
//!
//! Must not touch: what deadlines mean (the engine decides) or signal policy.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_size};

/// Microseconds on CLOCK_MONOTONIC (the base of [`Timer::arm_at`]).
pub fn monotonic_micros() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Sets the calling thread's timer slack (PR_SET_TIMERSLACK, default 50 µs)
/// to `ns` nanoseconds (minimum 1): bounds how late the kernel may coalesce
/// this thread's sleeps, e.g. an `epoll_wait` timeout.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_TIMERSLACK takes one unsigned long.
    cvt(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns.max(1) as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// Runs the calling thread under SCHED_FIFO at `priority` (1-99).
pub fn set_realtime(priority: u8) -> io::Result<()> {
    // SAFETY: sched_param is plain integers (musl's has more fields than
    // glibc's); all zeroes is a valid value.
    let mut p: libc::sched_param = unsafe { std::mem::zeroed() };
    p.sched_priority = libc::c_int::from(priority);
    // SAFETY: sched_setscheduler on the calling thread with a valid param.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) })?;
    Ok(())
}

/// A CPU wake-up latency limit (PM QoS, `/dev/cpu_dma_latency`): while it
/// is held, idle CPUs stay in states they can leave within `us` microseconds,
/// so a timer fires closer to its deadline (measured on this project's VM:
/// timerfd lateness p99 from 150-1200 µs down to 75-100 µs with 0). Costs
/// power: idle CPUs no longer sleep deeply. Released when dropped.
#[derive(Debug)]
pub struct CpuLatency {
    _fd: std::fs::File,
}

impl CpuLatency {
    /// Requests a wake-up latency of at most `us` microseconds.
    pub fn request(us: u32) -> io::Result<CpuLatency> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")?;
        let v = i32::try_from(us).unwrap_or(i32::MAX);
        f.write_all(&v.to_ne_bytes())?;
        Ok(CpuLatency { _fd: f })
    }
}

/// A one-shot timerfd on CLOCK_MONOTONIC (nonblocking, close-on-exec).
#[derive(Debug)]
pub struct Timer {
    fd: OwnedFd,
    armed_at: Option<u64>,
}

impl Timer {
    /// Creates a disarmed timer.
    pub fn new() -> io::Result<Timer> {
        // SAFETY: plain timerfd_create call, checked.
        let fd = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: fd is freshly created and owned here.
        Ok(Timer {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed_at: None,
        })
    }

    /// Arms the timer to fire at absolute [`monotonic_micros`] time `micros`
    /// (a time in the past fires at once). Re-arming with the same deadline
    /// is free (no syscall).
    pub fn arm_at(&mut self, micros: u64) -> io::Result<()> {
        if self.armed_at == Some(micros) {
            return Ok(());
        }
        // A zero it_value would disarm: the earliest real deadline is 1 ns.
        let t = if micros == 0 {
            libc::timespec {
                tv_sec: 0,
                tv_nsec: 1,
            }
        } else {
            libc::timespec {
                tv_sec: (micros / 1_000_000) as _,
                tv_nsec: ((micros % 1_000_000) * 1_000) as libc::c_long,
            }
        };
        self.settime(t)?;
        self.armed_at = Some(micros);
        Ok(())
    }

    /// Disarms the timer (no-op when not armed).
    pub fn disarm(&mut self) -> io::Result<()> {
        if self.armed_at.is_none() {
            return Ok(());
        }
        self.settime(libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        })?;
        self.armed_at = None;
        Ok(())
    }

    /// The deadline the timer is armed for, if any.
    pub fn deadline(&self) -> Option<u64> {
        self.armed_at
    }

    /// Consumes expirations: returns how many happened since the last read
    /// (0 if none; never blocks). After an expiration the timer is disarmed.
    pub fn read(&mut self) -> io::Result<u64> {
        let mut v = [0u8; 8];
        // SAFETY: v is an 8-byte writable buffer, as timerfd requires.
        match cvt_size(unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) }) {
            Ok(8) => {
                self.armed_at = None;
                Ok(u64::from_ne_bytes(v))
            }
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "short timerfd read",
            )),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    fn settime(&self, value: libc::timespec) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: spec is valid; old value not requested.
        cvt(unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }
}

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Timer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// SIGTERM, SIGINT and SIGHUP delivered through a signalfd.
///
/// [`Signals::new`] blocks those signals in the calling thread; call it on
/// the main thread before spawning any other thread so that every thread
/// inherits the mask (otherwise the default action may kill the process).
#[derive(Debug)]
pub struct Signals {
    fd: OwnedFd,
}

impl Signals {
    /// Blocks SIGTERM, SIGINT, SIGHUP in this thread and opens a nonblocking signalfd for them.
    pub fn new() -> io::Result<Signals> {
        // SAFETY: sigset manipulation on a local, zero-initialised set.
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if r != 0 {
                return Err(io::Error::from_raw_os_error(r));
            }
            cvt(libc::signalfd(
                -1,
                &set,
                libc::SFD_NONBLOCK | libc::SFD_CLOEXEC,
            ))?
        };
        // SAFETY: fd is freshly created and owned here.
        Ok(Signals {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The next pending signal number (`libc::SIGTERM`, ...), or `None` if none is pending.
    pub fn read(&self) -> io::Result<Option<i32>> {
        // SAFETY: signalfd_siginfo is plain old data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: info is a writable buffer of `size` bytes.
        match cvt_size(unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        }) {
            Ok(n) if n == size => Ok(Some(info.ssi_signo as i32)),
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "short signalfd read",
            )),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for Signals {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
