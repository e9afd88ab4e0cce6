//! # airpack: the daemon and its Linux I/O
//!
//! - [`daemon`]: configuration, the event loop driving `airpack_core::Engine`,
//!   the control socket, statistics export. Owns policy glue, not packet formats.
//! - [`linux`]: thin, tested wrappers over kernel networking (TUN, tcx egress
//!   steering with eBPF, crash cleanup, netlink route lookups, raw sockets, io_uring,
//!   timerfd/signalfd).
//!   Must not know about aggregation policy.

pub mod daemon;
pub mod linux;
