//! TODO(daemon helper): Linux I/O: TUN, nftables, routes, sockets, timers.
