//! A tiny epoll wrapper: register descriptors with a `u64` token, wait with a
//! timeout, iterate ready events without allocating.
//!
//! Owns: the epoll instance and the event array. Must not touch: the
//! descriptors themselves (callers own them and must `delete` before closing
//! if they keep polling).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// What to wait for on a descriptor (level-triggered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest {
    /// EPOLLIN.
    pub readable: bool,
    /// EPOLLOUT.
    pub writable: bool,
}

impl Interest {
    /// Readable only.
    pub const READ: Interest = Interest {
        readable: true,
        writable: false,
    };
    /// Writable only.
    pub const WRITE: Interest = Interest {
        readable: false,
        writable: true,
    };
    /// Neither (errors and hang-ups are still reported).
    pub const NONE: Interest = Interest {
        readable: false,
        writable: false,
    };
    /// Both.
    pub const BOTH: Interest = Interest {
        readable: true,
        writable: true,
    };

    fn bits(self) -> u32 {
        let mut b = 0;
        if self.readable {
            b |= libc::EPOLLIN as u32;
        }
        if self.writable {
            b |= libc::EPOLLOUT as u32;
        }
        b
    }
}

/// One ready descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The token given at registration.
    pub token: u64,
    /// Readable (EPOLLIN), or hung up / in error so a read will report it.
    pub readable: bool,
    /// Writable (EPOLLOUT).
    pub writable: bool,
    /// EPOLLERR or EPOLLHUP was set.
    pub error: bool,
}

/// A fixed-capacity buffer of ready events, reused across waits.
pub struct Events {
    buf: Vec<libc::epoll_event>,
    len: usize,
}

impl Events {
    /// Room for `capacity` events per wait (at least 1).
    pub fn with_capacity(capacity: usize) -> Events {
        Events {
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
            len: 0,
        }
    }

    /// The events of the last wait.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.buf[..self.len].iter().map(|e| {
            let bits = e.events;
            let error = bits & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
            Event {
                token: e.u64,
                readable: bits & libc::EPOLLIN as u32 != 0 || error,
                writable: bits & libc::EPOLLOUT as u32 != 0,
                error,
            }
        })
    }

    /// Number of events of the last wait.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the last wait returned no event.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An epoll instance.
#[derive(Debug)]
pub struct Poller {
    fd: OwnedFd,
}

impl Poller {
    /// Creates an epoll instance (close-on-exec).
    pub fn new() -> io::Result<Poller> {
        // SAFETY: plain epoll_create1 call, checked.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fd is freshly created and owned here.
        Ok(Poller {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Registers `fd` with `token`.
    pub fn add(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    /// Changes the token or interest of a registered `fd`.
    pub fn modify(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    /// Unregisters `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL since Linux 2.6.9.
        cvt(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }

    /// Waits for events; `timeout_ms`: `None` = forever, `Some(0)` = poll.
    /// (Use a [`super::Timer`] for sub-millisecond deadlines.) EINTR returns 0 events.
    pub fn wait(&self, events: &mut Events, timeout_ms: Option<i32>) -> io::Result<usize> {
        let cap = i32::try_from(events.buf.len()).unwrap_or(i32::MAX);
        // SAFETY: events.buf has `cap` writable epoll_event slots.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.buf.as_mut_ptr(),
                cap,
                timeout_ms.unwrap_or(-1),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            events.len = 0;
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        events.len = n as usize;
        Ok(events.len)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest.bits(),
            u64: token,
        };
        // SAFETY: ev is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }
}

impl AsRawFd for Poller {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::timer::{monotonic_micros, Timer};

    #[test]
    fn poller_reports_timer_token() {
        let p = Poller::new().unwrap();
        let mut t = Timer::new().unwrap();
        p.add(t.as_raw_fd(), 7, Interest::READ).unwrap();
        let mut ev = Events::with_capacity(4);
        assert_eq!(p.wait(&mut ev, Some(0)).unwrap(), 0);
        t.arm_at(monotonic_micros() + 1_000).unwrap();
        assert_eq!(p.wait(&mut ev, Some(1_000)).unwrap(), 1);
        let e = ev.iter().next().unwrap();
        assert_eq!(e.token, 7);
        assert!(e.readable);
        assert_eq!(t.read().unwrap(), 1);
        assert_eq!(t.read().unwrap(), 0);
    }
}
