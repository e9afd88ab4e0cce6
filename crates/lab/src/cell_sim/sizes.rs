//! Byte counts of the cell model (`airpack lab cell-sim`), taken from
//! airpack's own code so the simulation invents none: the downlink packet an
//! AP intercepts ([`voip_packet`]), its entry sizes in the compact frames
//! and the airtime rule's verdicts (driving airpack-core's real [`Mux`]),
//! the cell's rates as the daemon prices them, and the stations' uplink
//! bundles ([`bundle_sizes`]: the native encoding's lengths).
//!
//! Must not touch: the program's config of a point (the parent module), the
//! command (`cell_sim::run`).

use crate::experiment::ExperimentConfig;
use airpack_core::downlink::airtime::{CellPhy, Rate};
use airpack_core::downlink::compact;
use airpack_core::downlink::mux::{FrameReason, Mux, MuxConfig};
use anyhow::{bail, Context, Result};
use std::net::{IpAddr, Ipv4Addr};

/// Packets of one stream fed to the real mux to find its entry sizes.
pub const PROBE_PACKETS: usize = 64;

fn csum(data: &[u8], mut acc: u32) -> u32 {
    for w in data.chunks(2) {
        acc += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// One downlink packet as the AP intercepts it from an outer node: IPv4
/// (DF, IP ID `id`, TTL 63 after the cable's router), UDP with a valid
/// checksum, RTP (PT `pt`, sequence `seq`, timestamp `seq * step`, marker
/// on the first), `payload` voice bytes: what `airpack voip` sends.
pub fn voip_packet(seq: u16, step: u32, pt: u8, id: u16, payload: usize) -> Vec<u8> {
    voip_packet_to(2, seq, step, pt, id, payload)
}

/// [`voip_packet`] for the station at 10.201.0.`host`.
pub fn voip_packet_to(host: u8, seq: u16, step: u32, pt: u8, id: u16, payload: usize) -> Vec<u8> {
    let (src, dst) = ([10, 202, 0, 2], [10, 201, 0, host]);
    let udp_len = 8 + 12 + payload;
    let mut p = vec![0x45, 0xb8];
    p.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0, 63, 17, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = fold(csum(&p, 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut u = Vec::with_capacity(udp_len);
    u.extend_from_slice(&16000u16.to_be_bytes());
    u.extend_from_slice(&16000u16.to_be_bytes());
    u.extend_from_slice(&(udp_len as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0, 0x80, pt | if seq == 0 { 0x80 } else { 0 }]);
    u.extend_from_slice(&seq.to_be_bytes());
    u.extend_from_slice(&(u32::from(seq) * step).to_be_bytes());
    u.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    u.resize(udp_len, 0x55);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    let c = match fold(csum(&u, csum(&pseudo, 0))) {
        0 => 0xffff,
        c => c,
    };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&u);
    p
}

/// Entry bytes of a stream's packets in the AP's compact frames, from
/// airpack-core's [`Mux`] itself (default config: compact layout, TTL
/// decrement 1): one stream of `payload`-byte RTP packets, IP IDs
/// counting up (the emulated cell's measured bytes per entry, 26.9 for
/// G.729 and 167.5 for G.711, match counting IDs, not ID 0), each packet
/// flushed in its own frame, entry = frame - frame header. Returns the
/// repeating period and the sizes of the first packets (the last `period`
/// of them repeat). Errors if the sizes do not settle into a period.
pub fn entry_sizes(payload: usize, step: u32, pt: u8) -> Result<(usize, Vec<u32>)> {
    let mut m = Mux::new(MuxConfig::default());
    let dst = IpAddr::V4(Ipv4Addr::new(10, 201, 0, 2));
    m.add_stream(dst, 16000, 1)
        .map_err(|e| anyhow::anyhow!("add_stream: {e:?}"))?;
    m.set_link_busy(0, true);
    let mut buf = vec![0u8; m.config().max_frame];
    let mut sizes = Vec::with_capacity(PROBE_PACKETS);
    for k in 0..PROBE_PACKETS {
        let now = k as u64 * 20_000;
        let pkt = voip_packet(k as u16, step, pt, 100 + k as u16, payload);
        m.handle_packet(now, &pkt);
        m.flush();
        let t = m
            .poll_transmit(now, &mut buf)
            .context("the mux sent no frame")?;
        if t.unicast || t.packets != 1 {
            bail!("the mux did not multiplex the probe packet {k}");
        }
        sizes.push((t.len - compact::HEADER_LEN) as u32);
    }
    // the shortest period the second half repeats with
    let half = PROBE_PACKETS / 2;
    let period = (1..=half / 2)
        .find(|&p| (half..PROBE_PACKETS).all(|i| sizes[i] == sizes[i - p]))
        .context("entry sizes without a period")?;
    Ok((period, sizes))
}

/// The daemon's airtime rule as a table (`mux_rule`): entry `k - 1` is how
/// many times airpack-core's real [`Mux`] sends a frame of `k` entries of
/// this stream's packets (`payload` voice bytes, RTP step `step`, PT `pt`)
/// in a cell of rates `phy` with `copies` copies configured (the daemon's
/// `ap.unicast_rate`, `ap.multicast_rate`, `ap.frame_copies`), 0 = its
/// packets leave as unicast ([`Mux`]'s close: copies priced against
/// unicast, unicast when one copy does not pay). The rule's arithmetic is
/// the mux's own: for each k, k streams (one per station) each send one
/// packet per interval for [`PROBE_PACKETS`] intervals, the frame is
/// closed (`flush`) and what leaves is counted; the verdict is the most
/// frequent one of the second half (the steady state: compressed entries,
/// a full one every 16th packet). The table ends at the largest k whose
/// packets one frame holds (beyond it the model uses the last entry).
pub fn rule_table(phy: CellPhy, copies: u8, payload: usize, step: u32, pt: u8) -> Result<Vec<u8>> {
    let mut table = Vec::new();
    // stream ids stay below 128 (one-byte sid), as in the model
    for k in 1..=120u8 {
        let mut m = Mux::new(MuxConfig {
            airtime: Some(phy),
            copies,
            idle_release: false,
            ..MuxConfig::default()
        });
        for s in 0..k {
            let a = IpAddr::V4(Ipv4Addr::new(10, 201, 0, 2 + s));
            m.add_stream(a, 16000, u16::from(s) + 1)
                .map_err(|e| anyhow::anyhow!("add_stream: {e:?}"))?;
        }
        let mut buf = vec![0u8; m.config().max_frame];
        let mut verdicts = [0usize; 5];
        for j in 0..PROBE_PACKETS {
            let now = j as u64 * 20_000;
            for s in 0..k {
                let p = voip_packet_to(2 + s, j as u16, step, pt, 100 + j as u16, payload);
                m.handle_packet(now + u64::from(s), &p);
            }
            m.flush();
            let (mut frames, mut extra, mut unicast, mut split) = (0, 0, 0, false);
            while let Some(t) = m.poll_transmit(now + u64::from(k), &mut buf) {
                split |= t.reason != FrameReason::Flush;
                match (t.unicast, t.copy) {
                    (true, _) => unicast += t.packets,
                    (false, true) => extra += 1,
                    (false, false) => frames += 1,
                }
            }
            // an interval whose packets did not fit one frame (closed by
            // size: the full entries of every stream at once) says nothing
            let verdict = match (frames, unicast) {
                (1, 0) => 1 + extra,
                (0, u) if u == usize::from(k) => 0,
                _ => continue,
            };
            if j >= PROBE_PACKETS / 2 && !split {
                verdicts[verdict.min(4)] += 1;
            }
        }
        if verdicts.iter().all(|&v| v == 0) {
            break; // k packets never fit one frame
        }
        let best = (0..verdicts.len())
            .max_by_key(|&v| (verdicts[v], std::cmp::Reverse(v)))
            .unwrap_or(0);
        table.push(best as u8);
    }
    if table.is_empty() {
        bail!("the airtime rule's table is empty: one packet does not fit a frame");
    }
    Ok(table)
}

/// The `mux_rule` directive of `table` ([`rule_table`]).
pub fn rule_directive(table: &[u8]) -> String {
    let t: Vec<String> = table.iter().map(u8::to_string).collect();
    format!("mux_rule {}\n", t.join(" "))
}

/// The cell's rates as the daemon's airtime rule and loss guard price
/// them (`ap.unicast_rate`, `ap.multicast_rate` of the preset).
pub fn cell_phy(cfg: &ExperimentConfig) -> Result<CellPhy> {
    let r = crate::cell::Redundancy::of(&cfg.medium.phy, cfg.topo.wifi.multicast_mbit);
    let rate = |m| Rate::of(m, r.short_preamble).context("the preset's rate");
    Ok(CellPhy {
        unicast: rate(r.unicast_mbit)?,
        multicast: rate(r.multicast_mbit)?,
    })
}

/// IP bytes of a station's uplink bundle of `j` packets of `ip_bytes` each,
/// for `j` = 2 ..= `k` (the `agg_up` directive's sizes): the native
/// encoding (its header and one length prefix per packet, airpack-core's
/// `wire::native`) behind the raw IPv4 header (20 bytes, no options) of the
/// daemon's hop-by-hop transport, as [`crate::downlink_bound::bundle_ip_bytes`]
/// prices it.
pub fn bundle_sizes(ip_bytes: usize, k: u32) -> Vec<u32> {
    use airpack_core::wire::native;
    (2..=k as usize)
        .map(|j| (20 + native::HEADER_LEN + j * (native::prefix_len(ip_bytes) + ip_bytes)) as u32)
        .collect()
}
