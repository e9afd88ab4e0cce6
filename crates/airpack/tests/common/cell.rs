//! An infrastructure cell's shared medium for the downlink tests: a bridge in
//! a hub namespace (multicast snooping off, so group frames reach every port,
//! as on a radio) and veths from the AP and the stations to it.
//!
//! Owns: the bridge and its ports. Must not touch: addresses beyond the one
//! each attached interface gets, routes, daemons.

use super::{sh, Net};

impl Net {
    /// Creates `br0` in `hub`, multicast snooping off, and sets it up.
    pub fn bridge(&self, hub: &str) {
        self.ip(
            hub,
            &[
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ],
        );
        self.ip(hub, &["link", "set", "br0", "up"]);
    }

    /// A veth from `ns` (`ifname`, address `cidr`) to `hub`'s bridge
    /// (port `port_name`), both ends up.
    pub fn attach(&self, hub: &str, ns: &str, ifname: &str, port_name: &str, cidr: &str) {
        sh(&[
            "ip", "link", "add", ifname, "netns", ns, "type", "veth", "peer", "name", port_name,
            "netns", hub,
        ]);
        self.ip(hub, &["link", "set", port_name, "master", "br0"]);
        self.ip(hub, &["link", "set", port_name, "up"]);
        self.ip(ns, &["addr", "add", cidr, "dev", ifname]);
        self.ip(ns, &["link", "set", ifname, "up"]);
    }
}
