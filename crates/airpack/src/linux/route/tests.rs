//! Unit tests of the route module's message building and parsing and of the
//! monitor's classification, on hand-built netlink messages.

use super::monitor::classify;
use super::nlmsg::*;
use super::*;
use std::net::Ipv6Addr;

fn nlmsg(ty: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
    v.extend_from_slice(&ty.to_ne_bytes());
    v.extend_from_slice(&0u16.to_ne_bytes());
    v.extend_from_slice(&seq.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    v.extend_from_slice(payload);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

fn rta(ty: u16, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    v.extend_from_slice(&ty.to_ne_bytes());
    v.extend_from_slice(value);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

fn rtmsg(family: u8, rtype: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut v = vec![family, 32, 0, 0, 254, 0, 0, rtype, 0, 0, 0, 0];
    for a in attrs {
        v.extend_from_slice(a);
    }
    v
}

#[test]
fn request_layout() {
    let mut out = Vec::new();
    build_request(&mut out, 9, "10.0.0.1".parse().unwrap(), 0x4151);
    assert_eq!(out.len(), 16 + 12 + 8 + 8);
    assert_eq!(
        u32::from_ne_bytes(out[0..4].try_into().unwrap()) as usize,
        out.len()
    );
    assert_eq!(u16::from_ne_bytes([out[4], out[5]]), libc::RTM_GETROUTE);
    assert_eq!(out[16], libc::AF_INET as u8);
    assert_eq!(out[17], 32);
    assert_eq!(&out[32..36], &[10, 0, 0, 1]);
    assert_eq!(&out[40..44], &0x4151u32.to_ne_bytes());
    build_request(&mut out, 9, "fd00::1".parse().unwrap(), 0);
    assert_eq!(out.len(), 16 + 12 + 20);
    assert_eq!(out[17], 128);
}

#[test]
fn query_carries_source_and_input_interface() {
    let mut out = Vec::new();
    let q = Query {
        dst: "fd09::5".parse().unwrap(),
        src: Some("fd07::1".parse().unwrap()),
        mark: 0,
        iif: 0,
    };
    build_query(&mut out, 3, &q);
    assert_eq!(out.len(), 16 + 12 + 20 + 20);
    assert_eq!((out[17], out[18]), (128, 128), "dst_len, src_len");
    let attrs: Vec<_> = attributes(&out[28..]).map(|a| a.unwrap()).collect();
    assert_eq!(attrs[1].0, RTA_SRC);
    assert_eq!(attrs[1].1, &"fd07::1".parse::<Ipv6Addr>().unwrap().octets());
    // IPv4 input lookup; a source of the other family is left out.
    let q = Query {
        dst: "10.9.0.5".parse().unwrap(),
        src: Some("fd07::1".parse().unwrap()),
        mark: 7,
        iif: LOOPBACK_IFINDEX,
    };
    build_query(&mut out, 4, &q);
    assert_eq!(out[18], 0);
    let attrs: Vec<_> = attributes(&out[28..]).map(|a| a.unwrap().0).collect();
    assert_eq!(attrs, vec![RTA_DST, RTA_IIF, RTA_MARK]);
}

#[test]
fn route_notifications_give_prefixes() {
    let dst = rta(
        RTA_DST,
        &[0xfd, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    );
    let src = rta(
        RTA_SRC,
        &[0xfd, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    );
    let mut m = rtmsg(libc::AF_INET6 as u8, RTN_UNICAST, &[dst.clone(), src]);
    m[1] = 64;
    m[2] = 64;
    let p = parse_prefix(&m).unwrap();
    assert_eq!((p.dst_len, p.src.map(|s| s.1)), (64, Some(64)));
    assert!(p.covers(Some("fd07::9".parse().unwrap()), "fd09::1".parse().unwrap()));
    assert!(!p.covers(Some("fd08::9".parse().unwrap()), "fd09::1".parse().unwrap()));
    assert!(!p.covers(Some("fd07::9".parse().unwrap()), "fd0a::1".parse().unwrap()));
    assert!(p.covers(None, "fd09::1".parse().unwrap()));
    // Default route (no RTA_DST): every destination of the family.
    let mut d = rtmsg(libc::AF_INET as u8, RTN_UNICAST, &[]);
    d[1] = 0;
    let p = parse_prefix(&d).unwrap();
    assert!(p.covers(None, "192.0.2.1".parse().unwrap()));
    assert!(!p.covers(None, "fd09::1".parse().unwrap()));
    // Length beyond the family, wrong address size.
    let mut bad = rtmsg(libc::AF_INET as u8, RTN_UNICAST, &[]);
    bad[1] = 33;
    assert!(parse_prefix(&bad).is_err());
    let mut bad = rtmsg(libc::AF_INET as u8, RTN_UNICAST, &[dst]);
    bad[1] = 24;
    assert!(parse_prefix(&bad).is_err());
    // Through classify: the prefix is recorded, not "all".
    let mut c = Changes::default();
    let mut ps = Vec::new();
    classify(&nlmsg(libc::RTM_NEWROUTE, 0, &m), &mut c, &mut ps);
    assert!(c.route && !c.all() && ps.len() == 1, "{c:?} {ps:?}");
}

#[test]
fn parses_gateway_onlink_local_and_rejects_bad_lengths() {
    let dst: IpAddr = "10.9.0.1".parse().unwrap();
    let gw = rtmsg(
        2,
        RTN_UNICAST,
        &[
            rta(RTA_GATEWAY, &[10, 0, 0, 254]),
            rta(RTA_OIF, &7u32.to_ne_bytes()),
        ],
    );
    assert_eq!(
        parse_route(&gw, dst).unwrap(),
        NextHop {
            addr: "10.0.0.254".parse().unwrap(),
            oif: 7,
            gateway: true,
            local: false
        }
    );
    let onlink = rtmsg(2, RTN_UNICAST, &[rta(RTA_OIF, &3u32.to_ne_bytes())]);
    assert_eq!(
        parse_route(&onlink, dst).unwrap(),
        NextHop {
            addr: dst,
            oif: 3,
            gateway: false,
            local: false
        }
    );
    let local = rtmsg(2, RTN_LOCAL, &[rta(RTA_OIF, &1u32.to_ne_bytes())]);
    assert!(parse_route(&local, dst).unwrap().local);
    // Gateway of the wrong size, attribute overrunning the message, short rtmsg.
    assert!(parse_route(
        &rtmsg(2, RTN_UNICAST, &[rta(RTA_GATEWAY, &[10, 0, 0])]),
        dst
    )
    .is_err());
    let mut overrun = rtmsg(2, RTN_UNICAST, &[rta(RTA_OIF, &3u32.to_ne_bytes())]);
    overrun[12] = 200;
    assert!(parse_route(&overrun, dst).is_err());
    assert!(parse_route(&[2, 32, 0], dst).is_err());
    assert!(parse_route(&rtmsg(2, 6, &[]), dst).is_err()); // blackhole
}

#[test]
fn link_stats_parse_and_length_checks() {
    let mut p = vec![0u8; 16];
    p[8..12].copy_from_slice(&((libc::IFF_UP | libc::IFF_RUNNING) as u32).to_ne_bytes());
    let mut stats = Vec::new();
    for i in 1..=24u64 {
        stats.extend_from_slice(&i.to_ne_bytes());
    }
    p.extend(rta(23, &stats));
    let st = parse_link(&p).unwrap();
    assert!(st.up);
    assert_eq!(
        (st.rx_packets, st.tx_packets, st.rx_dropped, st.tx_dropped),
        (1, 2, 7, 8)
    );
    // Stats too short, missing, or ifinfomsg truncated.
    let mut short = vec![0u8; 16];
    short.extend(rta(23, &stats[..56]));
    assert!(parse_link(&short).is_err());
    assert!(parse_link(&[0u8; 16]).is_err());
    assert!(parse_link(&[0u8; 12]).is_err());
}

#[test]
fn message_iteration_checks_lengths() {
    let mut d = nlmsg(libc::RTM_NEWROUTE, 1, &[0; 12]);
    d.extend(nlmsg(libc::RTM_NEWLINK, 2, &[0; 16]));
    let v: Vec<_> = messages(&d).map(|m| m.unwrap().0).collect();
    assert_eq!(v, vec![libc::RTM_NEWROUTE, libc::RTM_NEWLINK]);
    let mut c = Changes::default();
    let mut p = Vec::new();
    classify(&d, &mut c, &mut p);
    assert!(c.route && c.link && !c.addr && !c.overrun);
    // An all-zero rtmsg is not a known family: the prefix is lost, not guessed.
    assert!(c.prefixes_lost && p.is_empty());
    // Length field larger than the datagram.
    let mut bad = nlmsg(libc::RTM_NEWADDR, 1, &[0; 4]);
    bad[0] = 200;
    assert!(messages(&bad).next().unwrap().is_err());
    let mut c = Changes::default();
    classify(&bad, &mut c, &mut Vec::new());
    assert!(c.overrun && !c.addr);
    // Length smaller than a header; trailing garbage shorter than a header.
    let mut small = nlmsg(libc::RTM_NEWADDR, 1, &[]);
    small[0] = 8;
    assert!(messages(&small).next().unwrap().is_err());
    assert!(messages(&[0u8; 7]).next().unwrap().is_err());
}
