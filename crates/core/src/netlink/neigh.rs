//! rtnetlink's neighbour table (`RTM_GETNEIGH` dump): which link-layer
//! address the kernel resolved for each neighbour's IP address, so the
//! daemon can match a discovered neighbour (known by IP) with the radio's
//! station (known by MAC).
//!
//! Owns: the dump request and a strict parser of `RTM_NEWNEIGH` messages
//! (`struct ndmsg` + `NDA_DST`, `NDA_LLADDR`; `<linux/neighbour.h>`).
//! Entries without a usable Ethernet address (incomplete, failed, no-ARP,
//! or a link-layer address that is not 6 bytes) are skipped, not errors.
//! Must not touch: sockets.

use super::{
    attrs, begin, finish, messages, NlError, NLMSG_DONE, NLMSG_ERROR, NLM_F_DUMP, NLM_F_REQUEST,
};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `RTM_NEWNEIGH`.
pub const RTM_NEWNEIGH: u16 = 28;
/// `RTM_GETNEIGH`.
pub const RTM_GETNEIGH: u16 = 30;
/// Length of `struct ndmsg`.
pub const NDMSG_LEN: usize = 12;
/// `NDA_DST`.
pub const NDA_DST: u16 = 1;
/// `NDA_LLADDR`.
pub const NDA_LLADDR: u16 = 2;
/// Linux `AF_INET`.
pub const AF_INET: u8 = 2;
/// Linux `AF_INET6`.
pub const AF_INET6: u8 = 10;
/// `NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT`: the
/// states whose link-layer address is known.
pub const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80;

/// One resolved neighbour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neigh {
    /// Interface index.
    pub ifindex: u32,
    /// Its IP address.
    pub addr: IpAddr,
    /// Its MAC address.
    pub mac: [u8; 6],
    /// `NUD_*` state.
    pub state: u16,
}

/// Dumps the neighbour table of both address families.
pub fn dump_request(out: &mut Vec<u8>, seq: u32) {
    begin(out, RTM_GETNEIGH, NLM_F_REQUEST | NLM_F_DUMP, seq);
    out.extend_from_slice(&[0u8; NDMSG_LEN]); // AF_UNSPEC, every interface
    finish(out);
}

/// One `RTM_NEWNEIGH` payload: `Ok(None)` for an entry without a usable
/// Ethernet address.
pub fn parse_neigh(payload: &[u8]) -> Result<Option<Neigh>, NlError> {
    let nd = payload.get(..NDMSG_LEN).ok_or(NlError::Length)?;
    let family = nd[0];
    let ifindex = u32::from_ne_bytes([nd[4], nd[5], nd[6], nd[7]]);
    let state = u16::from_ne_bytes([nd[8], nd[9]]);
    let (mut dst, mut ll) = (None, None);
    for a in attrs(&payload[NDMSG_LEN..]) {
        match a? {
            (NDA_DST, v) => dst = Some(v),
            (NDA_LLADDR, v) => ll = Some(v),
            _ => {}
        }
    }
    let addr = match (family, dst) {
        (AF_INET, Some(v)) => IpAddr::V4(Ipv4Addr::from(
            <[u8; 4]>::try_from(v).map_err(|_| NlError::BadValue)?,
        )),
        (AF_INET6, Some(v)) => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(v).map_err(|_| NlError::BadValue)?,
        )),
        (AF_INET | AF_INET6, None) => return Err(NlError::Missing),
        _ => return Ok(None), // bridge FDB entries and other families
    };
    let Some(mac) = ll.and_then(|v| <[u8; 6]>::try_from(v).ok()) else {
        return Ok(None);
    };
    if state & NUD_VALID == 0 {
        return Ok(None);
    }
    Ok(Some(Neigh {
        ifindex,
        addr,
        mac,
        state,
    }))
}

/// Parses one datagram of the answer to [`dump_request`] with sequence
/// `seq`: appends resolved neighbours to `out` while it holds fewer than
/// `cap` (more are counted in `left_out`); returns whether the dump is done.
pub fn parse_reply(
    buf: &[u8],
    seq: u32,
    out: &mut Vec<Neigh>,
    cap: usize,
    left_out: &mut u64,
) -> Result<bool, NlError> {
    for m in messages(buf) {
        let m = m?;
        if m.seq != seq {
            continue;
        }
        match m.ty {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => match m.error_code()? {
                0 => return Ok(true),
                e => return Err(NlError::Errno(e)),
            },
            RTM_NEWNEIGH => {
                if let Some(n) = parse_neigh(m.payload)? {
                    if out.len() < cap {
                        out.push(n);
                    } else {
                        *left_out += 1;
                    }
                }
            }
            _ => return Err(NlError::UnexpectedType),
        }
    }
    Ok(false)
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// Two RTM_NEWNEIGH messages written from `struct ndmsg`'s layout:
    /// 10.0.0.2 on ifindex 5 at 02:00:00:00:00:02, REACHABLE; 10.0.0.9
    /// INCOMPLETE (no lladdr, skipped).
    const DUMP: [u8; 84] = [
        48, 0, 0, 0, 28, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
        2, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 1, // ndmsg: AF_INET, ifindex 5, REACHABLE
        8, 0, 1, 0, 10, 0, 0, 2, // NDA_DST
        10, 0, 2, 0, 2, 0, 0, 0, 0, 2, 0, 0, // NDA_LLADDR + padding
        36, 0, 0, 0, 28, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
        2, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 1, // INCOMPLETE
        8, 0, 1, 0, 10, 0, 0, 9, // NDA_DST
    ];

    #[test]
    fn golden_neighbour_dump() {
        let mut out = Vec::new();
        let mut left = 0;
        assert_eq!(parse_reply(&DUMP, 4, &mut out, 16, &mut left), Ok(false));
        assert_eq!(
            out,
            vec![Neigh {
                ifindex: 5,
                addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                mac: [2, 0, 0, 0, 0, 2],
                state: 2,
            }]
        );
        for cut in 1..48 {
            assert!(
                parse_reply(&DUMP[..cut], 4, &mut out, 16, &mut left).is_err(),
                "{cut}"
            );
        }
        let mut b = DUMP;
        b[28] = 0; // NDA_DST claims 0 bytes: under its own header
        assert!(parse_reply(&b, 4, &mut out, 16, &mut left).is_err());
        let mut b = DUMP;
        b[28] = 7; // a 3-byte IPv4 address
        assert_eq!(
            parse_reply(&b, 4, &mut out, 16, &mut left),
            Err(NlError::BadValue)
        );
        let mut req = Vec::new();
        dump_request(&mut req, 4);
        assert_eq!(req.len(), 28);
        assert_eq!(&req[4..8], &[30, 0, 1, 3]);
    }
}
