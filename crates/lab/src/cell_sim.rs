//! Pure simulation of the infrastructure cell (issue 14 point 10; `airpack
//! lab cell-sim`): the cell of [`crate::cell`] (one AP, stations, two outer
//! nodes on cables behind the AP, call k = station <-> outer node) inside
//! the ns-3 program alone, no taps, no daemons, so that cells the real-time
//! air cannot carry (802.11g at 54 Mbit/s, 50-110 calls) get a number.
//!
//! Owns: the program's config of a cell point ([`cell_config`]: the voice
//! flows uplink `S -> AP -> O` and downlink `O -> AP -> S`, the cables
//! carrying their wired hop, and with multiplexing the `mux_*` directives
//! of `crates/lab/ns3/air_cell.cc`), the per-packet entry sizes of the AP's
//! compact frames ([`entry_sizes`], measured on airpack-core's real
//! [`Mux`]), the mux's report ([`MuxReport`]), a point ([`cell_point`],
//! judged by the quality path of every other point via
//! [`crate::validate_sim`]) and the command ([`main`]: capacity search per
//! setup and codec, against [`crate::cell::bound`]).
//!
//! Setups: `off` (each downlink packet a unicast frame from the AP),
//! `downlink-mux` (one frame per interval, or when full; no idle release
//! in this model), `downlink-mux-loss` (the same with the loss rule of
//! `airpack_core::downlink::loss`: `mux_loss`), `downlink-mux-red` / `-red2`
//! (redundancy depth 1 / 2).
//! `--send-jitter-us J`: each packet leaves up to J µs after its tick.
//! `--free-downlink` (setup `off` only): every call's downlink goes from its
//! outer node to its station over a cable of its own, so the AP sends no
//! voice on the air: the uplink's own capacity, the ceiling of any downlink
//! scheme (the bound's "uplink frames unchanged" with the DCF's collisions).
//! `--frame-copies N` (multiplexed setups): every frame is sent N times,
//! each copy its own channel access; a station takes the first it gets.
//! `--ap-vo` (any setup): the AP's voice (frames and unicast relays) on a
//! WMM access point's AC_VO queue (`ap_edca`, `crates/lab/ns3/air_edca.cc`;
//! stations keep the DCF's access): `off` with it is the fair control.
//! `--sta-vo-edca` (with `--ap-vo`): the stations' AC_VO kept at hostapd's
//! advertised values instead of the AP's own (which ns-3's beacons carry).
//! `--sta-be-edca` (with `--ap-vo`): the stations' AC_BE, where their voice
//! goes, kept at the given values (WMM's 3,15,1023) instead of the DCF's.
//! `--frame-guard` (multiplexed setups): before each frame the AP sends a
//! guard, an empty UDP datagram to the group that no station takes: what
//! collides when the AP's access meets a station's in one slot.
//! `--airtime-rule` (multiplexed setups): the daemon's per-frame airtime
//! rule (`Mux::close`: copies priced against unicast, unicast fallback) as
//! a table by entry count ([`rule_table`], computed by driving
//! airpack-core's real [`Mux`] with the preset's rates; `mux_rule`).
//! Not modelled: the idle release, the airtime rule without
//! `--airtime-rule` (and with it, the pricing of repeated blocks), partial
//! repeats, RTP-context loss at the stations (docs/lab.md 5).
//!
//! Must not touch: the emulated cell ([`crate::cell`], the daemons), the
//! E-model and support criterion, the search rule ([`crate::experiment`]).

use crate::air_ns3;
use crate::cell::CellSpec;
use crate::experiment::{voip_spec, ExperimentConfig, Point, Setup, SetupResult};
use crate::topology::{MediumOpts, Topology};
use crate::validate_sim::{sim_config, VoiceFlow};
use crate::voip::{Direction, Spec};
use airpack_core::downlink::airtime::{CellPhy, Rate};
use airpack_core::downlink::compact;
use airpack_core::downlink::loss::LossConfig;
use airpack_core::downlink::mux::{FrameReason, Mux, MuxConfig};
use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Simulated seconds before the first call: every station associates
/// first (beacons every 102.4 ms; with 100 stations the association
/// requests collide and are retried).
pub const WARMUP_S: f64 = 3.0;

/// Packets of one stream fed to the real mux to find its entry sizes.
const PROBE_PACKETS: usize = 64;

/// Redundancy depth of a setup in this model, None = no multiplexing.
pub fn depth(setup: Setup) -> Result<Option<u8>> {
    Ok(match setup {
        Setup::Off => None,
        Setup::DownlinkMux | Setup::DownlinkMuxInterval | Setup::DownlinkMuxLoss => Some(0),
        Setup::DownlinkMuxRed => Some(1),
        Setup::DownlinkMuxRed2 => Some(2),
        o => bail!(
            "cell-sim models off, downlink-mux, downlink-mux-loss, downlink-mux-red and downlink-mux-red2, not {}",
            o.name()
        ),
    })
}

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

/// The flows of `n` calls in `spec`'s cell for `cfg` (whose topology is
/// the cell of `n` calls): per call the uplink (a -> b: station -> AP ->
/// outer node) and the downlink (outer node -> AP -> station), each with a
/// random start phase as `airpack voip` draws.
pub fn cell_flows(cfg: &ExperimentConfig, spec: &Spec, warmup_s: f64) -> Result<Vec<VoiceFlow>> {
    let idx = |x: &str| {
        cfg.topo
            .nodes
            .iter()
            .position(|y| y == x)
            .with_context(|| format!("unknown node {x}"))
    };
    let ap = idx(crate::cell::AP)?;
    let interval_s = f64::from(spec.interval_ms) / 1000.0;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(spec.seed ^ 0xce11_5eed);
    let mut flows = Vec::new();
    for c in &spec.calls {
        let (s, o) = (idx(&c.a.node)?, idx(&c.b.node)?);
        for (dir, path) in [
            (Direction::AToB, vec![s, ap, o]),
            (Direction::BToA, vec![o, ap, s]),
        ] {
            flows.push(VoiceFlow {
                call: c.id,
                dir,
                path,
                start_s: warmup_s + rng.gen_range(0.0..interval_s),
            });
        }
    }
    Ok(flows)
}

/// The program's config of a cell point: [`sim_config`]'s (nodes, links,
/// infrastructure mode, multicast rate, cables, flows and paths) with the
/// flows' warm-up `warmup_s`, plus the multiplexer's directives when `depth`
/// is set.
pub fn cell_config(
    cfg: &ExperimentConfig,
    spec: &Spec,
    flows: &[VoiceFlow],
    warmup_s: f64,
    depth: Option<u8>,
    packets: &Path,
    report: &Path,
) -> Result<String> {
    let text = sim_config(cfg, spec, flows, packets)?;
    let duration = warmup_s
        + f64::from(spec.interval_ms) / 1000.0
        + spec.duration_s
        + spec.grace_ms as f64 / 1000.0;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("duration_s ") {
            out.push_str(&format!("duration_s {duration}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if let Some(d) = depth {
        let profile = spec.profile()?;
        let payload = airpack_voice::rtp::probe_payload_len(profile.payload_bytes());
        let (period, sizes) = entry_sizes(
            payload,
            profile.timestamp_step(),
            profile.params().payload_type,
        )?;
        let mc = MuxConfig::default();
        out.push_str(&format!(
            "mux_ap {} {} {} {} {} {d}\n",
            mc.interval,
            mc.max_frame,
            compact::HEADER_LEN,
            compact::REPEAT_LEN,
            mc.frame_overhead
        ));
        let s: Vec<String> = sizes.iter().map(u32::to_string).collect();
        out.push_str(&format!("mux_entry {period} {}\n", s.join(" ")));
        out.push_str(&format!("mux_report {}\n", report.display()));
    }
    Ok(out)
}

/// The `mux_loss` directive of the loss rule with `c`'s limits, one report
/// per station every `period_ms`, and its airtime guard priced by `phy`
/// (downlink packets of `ip_bytes`); new stations start on unicast with
/// `c.start_unicast`, with a trial `c.start_trial` later.
pub fn loss_directive(c: &LossConfig, phy: &CellPhy, ip_bytes: u32, period_ms: u32) -> String {
    let (m0, m1) = (phy.multicast_us(0), phy.multicast_us(1500));
    format!(
        "mux_loss {} {} {} {} {} {} {} {} {} {} {} {}\n",
        c.limit,
        c.clear,
        c.keep,
        c.min_frames,
        u64::from(period_ms) * 1000,
        c.airtime_budget,
        phy.unicast_us(ip_bytes),
        m0,
        (m1 - m0) / 1500.0,
        u8::from(c.start_unicast),
        c.start_check,
        c.start_trial
    )
}

/// One station's view of the multiplexed frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StationRx {
    /// Node name.
    pub node: String,
    /// Frames it received.
    pub frames: u64,
    /// Its packets taken from the frames' own entries.
    pub own: u64,
    /// Its packets taken from repeated blocks (the frame that carried them was lost).
    pub recovered: u64,
    /// Its packets it already had.
    pub duplicates: u64,
    /// Extra copies of frames it had already taken (`--frame-copies`).
    #[serde(default)]
    pub copies: u64,
    /// The most frames it missed in a row (after its first frame).
    #[serde(default)]
    pub max_gap: u64,
    /// Simulated time (µs) of the frame that ended that gap.
    #[serde(default)]
    pub max_gap_at_us: u64,
}

/// The multiplexer model's counters (`mux_report`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MuxReport {
    /// Frames sent (multicast; without the airtime rule's unicast frames).
    pub frames: u64,
    /// Packets in them (own entries).
    pub entries: u64,
    /// Frame bytes (UDP payload) sent.
    pub frame_bytes: u64,
    /// Frames closed because the next entry did not fit (the airtime
    /// rule's unicast frames included, as for the next field).
    pub closed_size: u64,
    /// Frames closed at the interval.
    pub closed_interval: u64,
    /// Entries repeated (redundancy).
    pub repeated: u64,
    /// Loss rule: moves of a station to unicast.
    #[serde(default)]
    pub loss_to_unicast: u64,
    /// Loss rule: returns to the frame.
    #[serde(default)]
    pub loss_to_multicast: u64,
    /// Loss rule: packets served by unicast instead of the frame.
    #[serde(default)]
    pub loss_unicast_packets: u64,
    /// Loss rule: reports of a station that received no frame while frames were sent.
    #[serde(default)]
    pub loss_blackouts: u64,
    /// Loss rule: moves to unicast refused by the airtime guard.
    #[serde(default)]
    pub loss_held_airtime: u64,
    /// Loss rule: returns to the frame because the load was above the budget.
    #[serde(default)]
    pub loss_shed: u64,
    /// Loss rule: new stations started on unicast.
    #[serde(default)]
    pub loss_start_unicast: u64,
    /// Loss rule: new stations the guard started in the frame.
    #[serde(default)]
    pub loss_start_held: u64,
    /// Loss rule: new stations moved to the frame by a clean report.
    #[serde(default)]
    pub loss_start_cleared: u64,
    /// Loss rule: trials of new stations (their packets in the frame and by unicast).
    #[serde(default)]
    pub loss_start_trials: u64,
    /// Loss rule: packets sent both in a frame and by unicast on a trial.
    #[serde(default)]
    pub loss_trial_packets: u64,
    /// Airtime rule (`--airtime-rule`): frames whose packets left as unicast.
    #[serde(default)]
    pub rule_unicast_frames: u64,
    /// Airtime rule: packets of those frames.
    #[serde(default)]
    pub rule_unicast_packets: u64,
    /// Airtime rule: copies not sent because they would not pay.
    #[serde(default)]
    pub rule_copies_priced_out: u64,
    /// Guard packets sent before frames (`--frame-guard`).
    #[serde(default)]
    pub guards: u64,
    /// Stations that received at least one frame.
    pub stations: Vec<StationRx>,
}

impl MuxReport {
    /// Parse the program's report (strict: every field present).
    pub fn parse(text: &str) -> Result<MuxReport> {
        let r: MuxReport = serde_json::from_str(text.trim()).context("mux report")?;
        if r.entries < r.frames
            || r.closed_size + r.closed_interval != r.frames + r.rule_unicast_frames
        {
            bail!("mux report inconsistent: {}", text.trim());
        }
        Ok(r)
    }
    /// Mean share of frames a station missed (%), over `stations` stations.
    pub fn lost_frames_pct(&self, stations: usize) -> f64 {
        if self.frames == 0 || stations == 0 {
            return 0.0;
        }
        let got: u64 = self.stations.iter().map(|s| s.frames).sum();
        100.0 * (1.0 - got as f64 / (self.frames as f64 * stations as f64))
    }
}

/// Measure `n` calls of `cfg`'s cell (its `topo.cell`) under `setup` in
/// pure simulation: the same [`Point`] as an emulated point of the cell,
/// judged the same way; `downlink["AP.mux"]` holds the [`MuxReport`].
pub fn cell_point(cfg: &ExperimentConfig, setup: Setup, n: u32) -> Result<Point> {
    let knobs = Knobs {
        edca: AP_EDCA.get().copied().flatten(),
        send_jitter_us: SEND_JITTER_US.get().copied().unwrap_or(0),
        free_downlink: FREE_DOWNLINK.get().copied().unwrap_or(false),
        frame_copies: FRAME_COPIES.get().copied().unwrap_or(1),
        airtime_rule: AIRTIME_RULE.get().copied().unwrap_or(false),
        sta_vo: STA_VO.get().copied().flatten(),
        sta_be: STA_BE.get().copied().flatten(),
        frame_guard: FRAME_GUARD.get().copied().unwrap_or(false),
    };
    cell_point_with(cfg, setup, n, knobs)
}

/// The model's options of a point (the run's flags).
#[derive(Clone, Copy, Debug, Default)]
pub struct Knobs {
    /// The AP's AC_VO at `[aifsn, cwmin, cwmax, txop_us]` (`--ap-vo`), or
    /// the DCF (None); with it the point's `downlink["AP.edca"]` holds the
    /// program's counters (AP packets tagged, MPDUs queued at the AP's
    /// AC_VO and AC_BE).
    pub edca: Option<[u32; 4]>,
    /// Every packet leaves up to this many µs after its tick
    /// (`--send-jitter-us`, 0: none).
    pub send_jitter_us: u32,
    /// Downlinks over cables of their own (`--free-downlink`, setup off).
    pub free_downlink: bool,
    /// Every multiplexed frame sent this many times (`--frame-copies`,
    /// the daemon's `ap.frame_copies`; 0 or 1: once).
    pub frame_copies: u32,
    /// The daemon's per-frame airtime rule (`--airtime-rule`,
    /// [`rule_table`]): copies priced against unicast, unicast fallback.
    pub airtime_rule: bool,
    /// With `edca`: the stations' AC_VO kept at `[aifsn, cwmin, cwmax]`
    /// (`--sta-vo-edca`, hostapd's advertised `wmm_ac_vo_*`); None: the
    /// stations take the AP's AC_VO from its beacons, as ns-3 does.
    pub sta_vo: Option<[u32; 3]>,
    /// With `edca`: the stations' AC_BE (their voice) kept at `[aifsn,
    /// cwmin, cwmax]` (`--sta-be-edca`, hostapd's advertised `wmm_ac_be_*`);
    /// None: the DCF's access.
    pub sta_be: Option<[u32; 3]>,
    /// Multiplexed setups: a guard (an empty UDP datagram to the group,
    /// 28 bytes of IPv4) before each frame (`--frame-guard`).
    pub frame_guard: bool,
}

/// [`cell_point`] with the model's options `knobs`. The calls start after
/// every station has associated: a point whose last association came after
/// its first packet (association requests that keep colliding, as with the
/// AP's smallest contention windows) is measured again with the warm-up
/// extended past it (up to 60 simulated seconds); `downlink["cell.assoc"]`
/// holds the warm-up used and the associations.
pub fn cell_point_with(
    cfg: &ExperimentConfig,
    setup: Setup,
    n: u32,
    knobs: Knobs,
) -> Result<Point> {
    let mut warmup_s = WARMUP_S;
    loop {
        let p = cell_point_at(cfg, setup, n, knobs, warmup_s)?;
        let a = &p.downlink["cell.assoc"];
        let all = a["associated"] == a["stations"];
        let last_s = a["last_assoc_us"].as_f64().unwrap_or(0.0) / 1e6;
        if all && last_s < a["first_packet_us"].as_f64().unwrap_or(0.0) / 1e6 {
            return Ok(p);
        }
        if warmup_s >= 60.0 {
            bail!(
                "{} of {} stations associated, the last at {last_s:.2} s, with a warm-up of {warmup_s} s",
                a["associated"],
                a["stations"]
            );
        }
        // all associated: just past the last; else the run's end at least
        let past = if all { last_s + 1.0 } else { warmup_s * 2.0 };
        warmup_s = past.ceil().max(warmup_s + 1.0).min(60.0);
    }
}

/// One run of [`cell_point_with`] with the calls starting after `warmup_s`.
fn cell_point_at(
    cfg: &ExperimentConfig,
    setup: Setup,
    n: u32,
    knobs: Knobs,
    warmup_s: f64,
) -> Result<Point> {
    let Knobs {
        edca,
        send_jitter_us,
        free_downlink: free,
        frame_copies,
        airtime_rule,
        sta_vo,
        sta_be,
        frame_guard,
    } = knobs;
    let t0 = Instant::now();
    if crate::netns::interrupted() {
        bail!("interrupted");
    }
    let cell = cfg.topo.cell.clone().context("not a cell topology")?;
    let d = depth(setup)?;
    let mut cfg = cfg.clone();
    cfg.topo = cell.topology(n);
    let addr = |x: &str| {
        let i = cfg.topo.nodes.iter().position(|y| y == x).unwrap_or(0);
        Topology::addr_of(i).to_string()
    };
    let mut spec: Spec =
        serde_json::from_value(voip_spec(&cfg, &addr, n, 0)).context("voip spec type")?;
    spec.start_at_unix_ms = None;
    let mut flows = cell_flows(&cfg, &spec, warmup_s)?;
    if free {
        if setup != Setup::Off {
            bail!(
                "--free-downlink models the setup off only, not {}",
                setup.name()
            );
        }
        free_downlink(&mut cfg.topo, &mut flows);
    }
    let dir = cfg
        .work_dir
        .join(format!("cellsim-{}-{n}-{}", setup.name(), cfg.seed));
    std::fs::create_dir_all(&dir)?;
    let (packets, report) = (dir.join("packets.txt"), dir.join("mux.json"));
    let mut text = cell_config(&cfg, &spec, &flows, warmup_s, d, &packets, &report)?;
    let first_packet_us = flows
        .iter()
        .map(|f| f.start_s)
        .fold(f64::INFINITY, f64::min)
        * 1e6;
    let profile = spec.profile()?;
    let payload = airpack_voice::rtp::probe_payload_len(profile.payload_bytes());
    if setup == Setup::DownlinkMuxLoss {
        let phy = cell_phy(&cfg)?;
        let ip = voip_packet(0, 0, 0, 0, payload).len() as u32;
        let c = LossConfig {
            airtime_budget: *LOSS_BUDGET
                .get()
                .unwrap_or(&LossConfig::default().airtime_budget),
            start_unicast: *LOSS_START_UNICAST
                .get()
                .unwrap_or(&LossConfig::default().start_unicast),
            ..LossConfig::default()
        };
        let period_ms = *LOSS_REPORT_MS.get().unwrap_or(&1000);
        text.push_str(&loss_directive(&c, &phy, ip, period_ms));
    }
    if let Some(e) = edca {
        text.push_str(&edca_directive_sta(e, sta_vo, sta_be));
    }
    if send_jitter_us > 0 {
        text.push_str(&format!("send_jitter_us {send_jitter_us}\n"));
    }
    if d.is_some() && frame_guard {
        text.push_str("mux_guard 28\n");
    }
    if d.is_some() && frame_copies > 1 {
        text.push_str(&format!("mux_copies {frame_copies}\n"));
    }
    let mut rule = None;
    if d.is_some() && airtime_rule {
        let copies = u8::try_from(frame_copies.clamp(1, 4)).unwrap_or(1);
        let table = rule_table(
            cell_phy(&cfg)?,
            copies,
            payload,
            profile.timestamp_step(),
            profile.params().payload_type,
        )?;
        text.push_str(&rule_directive(&table));
        rule = Some(table);
    }
    let (mut p, r) =
        crate::validate_sim::run_program(&cfg, setup, n, &spec, &flows, &dir, text, &packets, t0)?;
    let stations = cfg.topo.nodes.len() - 1 - crate::cell::OUTER;
    let assoc = r["associated"].as_u64().unwrap_or(0);
    p.downlink.insert(
        "cell.assoc".into(),
        serde_json::json!({
            "warmup_s": warmup_s,
            "associated": assoc,
            "stations": stations,
            "first_packet_us": first_packet_us.round(),
            "last_assoc_us": r["last_assoc_us"],
            "assoc_events": r["assoc_events"],
        }),
    );
    if edca.is_some() {
        let vo = r["ap_edca"]["ap_vo_mpdus"].as_u64();
        if vo.unwrap_or(0) == 0 {
            bail!(
                "--ap-vo: the AP queued no voice on AC_VO ({})",
                r["ap_edca"]
            );
        }
        p.downlink.insert("AP.edca".into(), r["ap_edca"].clone());
    }
    if d.is_some() {
        let m = MuxReport::parse(
            &std::fs::read_to_string(&report).context("the simulation's mux report")?,
        )?;
        if m.frames > 0 {
            p.aggregation_ratio = m.entries as f64 / m.frames as f64;
        }
        let mut v = serde_json::to_value(&m)?;
        v["lost_frames_pct"] = serde_json::json!(m.lost_frames_pct(stations));
        if let Some(t) = rule {
            v["rule_table"] = serde_json::json!(t);
        }
        p.downlink.insert("AP.mux".into(), v);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(p)
}

/// `--free-downlink`: each downlink flow's path becomes `[outer, station]`
/// over a cable of its own (added to `topo`, as the outer nodes' cables to
/// the AP), so only the uplink and the AP's relays onto the wire remain.
pub fn free_downlink(topo: &mut Topology, flows: &mut [VoiceFlow]) {
    let base = topo.wired.first().cloned();
    for f in flows.iter_mut().filter(|f| f.dir == Direction::BToA) {
        let (o, s) = (f.path[0], *f.path.last().expect("a path"));
        let (a, b) = (topo.nodes[o].clone(), topo.nodes[s].clone());
        if !topo.wired.iter().any(|w| w.a == a && w.b == b) {
            let (rate_mbit, delay_ms) = base
                .as_ref()
                .map_or((100.0, 0.0), |w| (w.rate_mbit, w.delay_ms));
            topo.wired.push(crate::air_opts::Wired {
                a,
                b,
                rate_mbit,
                delay_ms,
            });
        }
        f.path = vec![o, s];
    }
}

/// `airpack lab cell-sim` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct CellSimArgs {
    /// Cell presets, comma separated (`cell:PHY[:MC[:K]]`, as `lab run --preset`).
    #[arg(long, default_value = "cell:b11:11")]
    presets: String,
    /// Codecs, comma separated (g729, g711).
    #[arg(long, default_value = "g729,g711")]
    codecs: String,
    /// Setups, comma separated (off, downlink-mux, downlink-mux-loss, downlink-mux-red, downlink-mux-red2).
    #[arg(long, default_value = "off,downlink-mux,downlink-mux-red")]
    setups: String,
    /// Seconds of calls per point.
    #[arg(long, default_value_t = 8.0)]
    duration: f64,
    /// Upper bound of the call search (default: the setup's analytic
    /// bound x 1.25 + 2; overloaded points of a large cell cost minutes).
    #[arg(long)]
    max_calls: Option<u32>,
    /// MAC queue limit (packets), as the lab's `--queue-limit`.
    #[arg(long, default_value_t = 50)]
    queue_limit: u32,
    /// JSON of the run (default: results/cell-sim-<unix time>.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// `downlink-mux-loss`: the airtime guard's budget (share of the
    /// channel; default `LossConfig::default().airtime_budget`).
    #[arg(long)]
    loss_budget: Option<f64>,
    /// `downlink-mux-loss`: the stations' report period, ms (the daemon's
    /// `station.report_ms`).
    #[arg(long, default_value_t = 1000)]
    loss_report_ms: u32,
    /// `downlink-mux-loss`: new stations start on unicast until a clean
    /// report, with a trial (`ap.loss_start_unicast = true`, the daemon's
    /// default; kept for old command lines).
    #[arg(long)]
    loss_start_unicast: bool,
    /// Every setup: the AP sends its voice (multiplexed frames and unicast
    /// downlink) on a WMM AP's AC_VO queue, the stations keep the DCF's
    /// access (docs/lab.md 5; `off` with it is the control).
    #[arg(long)]
    ap_vo: bool,
    /// With `--ap-vo`: the AP's AC_VO as `AIFSN,CWMIN,CWMAX[,TXOP_US]`
    /// (default hostapd's 1,3,7 without TXOP bursts).
    #[arg(long, default_value = "1,3,7,0")]
    ap_vo_edca: String,
    /// Every packet of a call leaves up to this many µs (uniform) after
    /// its nominal 20-ms tick, as a phone's scheduler jitters (default 0:
    /// exactly periodic, which can phase-lock a station's uplink with the
    /// AP's frame, docs/results.md).
    #[arg(long, default_value_t = 0)]
    send_jitter_us: u32,
    /// `downlink-mux-loss`: new stations start in the frame
    /// (`ap.loss_start_unicast = false`).
    #[arg(long, conflicts_with = "loss_start_unicast")]
    loss_start_frame: bool,
    /// Setup `off` only: every call's downlink reaches its station over a
    /// cable of its own (no voice from the AP on the air): the capacity of
    /// the uplink alone, the ceiling of any downlink scheme.
    #[arg(long)]
    free_downlink: bool,
    /// Multiplexed setups: every frame is sent this many times (1-4), each
    /// copy its own channel access (the daemon's `ap.frame_copies`).
    #[arg(long, default_value_t = 1)]
    frame_copies: u32,
    /// Multiplexed setups: the daemon's per-frame airtime rule with the
    /// preset's rates (`Mux::close`: a frame is sent as many times, up to
    /// `--frame-copies`, as still cost less than its packets as unicast,
    /// and its packets leave as unicast when one copy does not pay).
    #[arg(long)]
    airtime_rule: bool,
    /// With `--ap-vo`: keep the stations' AC_VO at `AIFSN,CWMIN,CWMAX`
    /// (hostapd advertises `wmm_ac_vo_*`, 2,3,7, apart from the AP's own
    /// queue; without it the stations take the AP's AC_VO from its beacons).
    #[arg(long)]
    sta_vo_edca: Option<String>,
    /// With `--ap-vo`: keep the stations' AC_BE, where their voice goes, at
    /// `AIFSN,CWMIN,CWMAX` (a WMM station's best effort: 3,15,1023 in g,
    /// 3,31,1023 in b; without it the DCF's 2,CWMIN,1023).
    #[arg(long)]
    sta_be_edca: Option<String>,
    /// Multiplexed setups: before each frame the AP sends a guard, an empty
    /// UDP datagram to the group (28 bytes) that no station takes; what
    /// collides when the AP's first slot meets a station's.
    #[arg(long)]
    frame_guard: bool,
}

/// The run's `--sta-vo-edca` (set once by [`main`]).
static STA_VO: std::sync::OnceLock<Option<[u32; 3]>> = std::sync::OnceLock::new();

/// The run's `--frame-guard` (set once by [`main`]).
static FRAME_GUARD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The run's `--sta-be-edca` (set once by [`main`]).
static STA_BE: std::sync::OnceLock<Option<[u32; 3]>> = std::sync::OnceLock::new();

/// The run's `--airtime-rule` (set once by [`main`]).
static AIRTIME_RULE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The run's `--frame-copies` (set once by [`main`]).
static FRAME_COPIES: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The run's `--free-downlink` (set once by [`main`]).
static FREE_DOWNLINK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The run's `--send-jitter-us` (set once by [`main`]).
static SEND_JITTER_US: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The run's `--ap-vo` EDCA values of the AP's AC_VO (set once by [`main`]).
static AP_EDCA: std::sync::OnceLock<Option<[u32; 4]>> = std::sync::OnceLock::new();

/// The AP's AC_VO of hostapd's defaults (`tx_queue_data0_aifs/cwmin/cwmax`;
/// `tx_queue_data0_burst` is 1.5 ms there, 0 here unless `--ap-vo-edca` says).
pub const AP_VO_DEFAULT: [u32; 4] = [1, 3, 7, 0];

/// The `ap_edca` directive: the AP's AC_VO at `[aifsn, cwmin, cwmax, txop_us]`.
pub fn edca_directive(e: [u32; 4]) -> String {
    edca_directive_sta(e, None, None)
}

/// [`edca_directive`] with the stations' AC_VO kept at `sta_vo` (`[aifsn,
/// cwmin, cwmax]`, `--sta-vo-edca`: the directive's optional last fields)
/// and their AC_BE at `sta_be` (`--sta-be-edca`: a `sta_be_edca` line).
pub fn edca_directive_sta(
    e: [u32; 4],
    sta_vo: Option<[u32; 3]>,
    sta_be: Option<[u32; 3]>,
) -> String {
    let mut d = format!("ap_edca {} {} {} {}", e[0], e[1], e[2], e[3]);
    if let Some(v) = sta_vo {
        d.push_str(&format!(" {} {} {}", v[0], v[1], v[2]));
    }
    d.push('\n');
    if let Some(b) = sta_be {
        d.push_str(&format!("sta_be_edca {} {} {}\n", b[0], b[1], b[2]));
    }
    d
}

/// Parse a station queue's `AIFSN,CWMIN,CWMAX` (`--sta-vo-edca`,
/// `--sta-be-edca`: [`parse_edca`]'s values without a TXOP).
pub fn parse_station_edca(s: &str) -> Result<[u32; 3]> {
    let e = parse_edca(s)?;
    if e[3] != 0 {
        bail!("{s}: AIFSN,CWMIN,CWMAX (a station's queue has no TXOP here)");
    }
    Ok([e[0], e[1], e[2]])
}

/// Parse `--ap-vo-edca` (`AIFSN,CWMIN,CWMAX[,TXOP_US]`; CW values 2^k - 1).
pub fn parse_edca(s: &str) -> Result<[u32; 4]> {
    let v: Vec<u32> = s
        .split(',')
        .map(|x| x.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("--ap-vo-edca {s}: numbers expected"))?;
    if !(3..=4).contains(&v.len()) {
        bail!("--ap-vo-edca {s}: AIFSN,CWMIN,CWMAX[,TXOP_US]");
    }
    let e = [v[0], v[1], v[2], v.get(3).copied().unwrap_or(0)];
    let cw_ok = |c: u32| c <= 32767 && (c + 1).is_power_of_two();
    if !(1..=15).contains(&e[0]) || !cw_ok(e[1]) || !cw_ok(e[2]) || e[1] > e[2] || e[3] > 8160 {
        bail!("--ap-vo-edca {s}: AIFSN 1-15, CWMIN <= CWMAX of the form 2^k-1 (<= 32767), TXOP <= 8160 us");
    }
    Ok(e)
}

/// The run's `--loss-start-unicast` (set once by [`main`]).
static LOSS_START_UNICAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The run's `--loss-report-ms` (set once by [`main`]).
static LOSS_REPORT_MS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The run's `--loss-budget` (set once by [`main`]).
static LOSS_BUDGET: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// One row of the run: a preset, codec and setup's capacity and its bound.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Cell preset.
    pub preset: String,
    /// Codec.
    pub codec: String,
    /// Analytic bound of the setup ([`crate::cell::bound`]: off or mux).
    pub bound: u32,
    /// The search (capacity and every point).
    pub result: SetupResult,
}

/// The experiment config of a cell preset (pure simulation: no binary runs
/// in namespaces).
pub fn config(preset: &str, codec: &str, a: &CellSimArgs, work: &Path) -> Result<ExperimentConfig> {
    let cell = CellSpec::parse(preset).context("not a cell preset (cell:PHY[:MC[:K]])")??;
    let topo = cell.topology(1);
    let phy = crate::medium::preset(&cell.phy).context("cell PHY")?;
    Ok(ExperimentConfig::cbr(
        "/bin/true".into(),
        topo,
        MediumOpts {
            phy,
            queue_limit: a.queue_limit,
            loss_pct: 0.0,
        },
        codec,
        a.duration,
        a.max_calls.unwrap_or(64),
        work.to_path_buf(),
    ))
}

/// Run the searches and write the JSON.
pub fn main(a: CellSimArgs) -> Result<()> {
    air_ns3::check_available().map_err(|e| anyhow::anyhow!(e))?;
    if let Some(b) = a.loss_budget {
        if !(b > 0.0 && b <= 4.0) {
            bail!("--loss-budget {b}: must be above 0 and at most 4");
        }
        let _ = LOSS_BUDGET.set(b);
    }
    if !(50..=60_000).contains(&a.loss_report_ms) {
        bail!("--loss-report-ms {}: must be in 50-60000", a.loss_report_ms);
    }
    let _ = LOSS_REPORT_MS.set(a.loss_report_ms);
    let _ = LOSS_START_UNICAST.set(!a.loss_start_frame);
    let edca = parse_edca(&a.ap_vo_edca)?;
    let _ = AP_EDCA.set(a.ap_vo.then_some(edca));
    if a.send_jitter_us >= 20_000 {
        bail!("--send-jitter-us {}: must be below 20000", a.send_jitter_us);
    }
    let _ = SEND_JITTER_US.set(a.send_jitter_us);
    let _ = FREE_DOWNLINK.set(a.free_downlink);
    if !(1..=4).contains(&a.frame_copies) {
        bail!("--frame-copies {}: must be 1-4", a.frame_copies);
    }
    let _ = FRAME_COPIES.set(a.frame_copies);
    let _ = AIRTIME_RULE.set(a.airtime_rule);
    let _ = FRAME_GUARD.set(a.frame_guard);
    let station_edca = |flag: &str, v: &Option<String>| -> Result<Option<[u32; 3]>> {
        let Some(v) = v else { return Ok(None) };
        let e = parse_station_edca(v).with_context(|| format!("--{flag}"))?;
        if !a.ap_vo {
            bail!("--{flag} needs --ap-vo (every node a QoS node)");
        }
        Ok(Some(e))
    };
    let _ = STA_VO.set(station_edca("sta-vo-edca", &a.sta_vo_edca)?);
    let _ = STA_BE.set(station_edca("sta-be-edca", &a.sta_be_edca)?);
    crate::netns::catch_interrupts();
    let split = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    let setups: Vec<Setup> = split(&a.setups)
        .iter()
        .map(|s| Setup::parse(s))
        .collect::<Result<_>>()?;
    for s in &setups {
        depth(*s)?;
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("results/cell-sim-{secs}.json")));
    let work = std::env::temp_dir().join(format!("airpack-cell-sim-{}", std::process::id()));
    let mut rows = Vec::new();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    for preset in split(&a.presets) {
        for codec in split(&a.codecs) {
            let cfg = config(&preset, &codec, &a, &work)?;
            let cell = cfg.topo.cell.clone().expect("cell");
            let (b_off, b_mux) = crate::cell::bound(&cell, &codec)?;
            for &setup in &setups {
                let bound = if setup == Setup::Off { b_off } else { b_mux };
                eprintln!(
                    "cell-sim: {preset} {codec} {} (bound {bound}), pure simulation",
                    setup.name()
                );
                let mut cfg = cfg.clone();
                cfg.max_calls = a.max_calls.unwrap_or(bound * 5 / 4 + 2);
                let result =
                    crate::experiment::capacity_search_with(&cfg, setup, cell_point, |p| {
                        eprintln!("  {}", crate::experiment::point_line(p))
                    });
                eprintln!("  capacity {} (bound {bound})", result.capacity);
                rows.push(Row {
                    preset: preset.clone(),
                    codec: codec.clone(),
                    bound,
                    result,
                });
                write_json(&out, &command, &rows)?;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    println!("{}", table(&rows));
    Ok(())
}

fn write_json(out: &Path, command: &str, rows: &[Row]) -> Result<()> {
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    let v = serde_json::json!({
        "note": "pure ns-3 simulation of the cell (airpack lab cell-sim), not emulated",
        "command": command,
        "rows": rows,
    });
    std::fs::write(out, serde_json::to_string(&v)?)?;
    Ok(())
}

/// Markdown table of the rows: capacity against the bound.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| preset | codec | setup | bound | pure sim | sim / bound |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let c = r.result.capacity;
        let cap = match (&r.result.error, r.result.capacity_at_least) {
            (Some(e), _) => format!("error: {e}"),
            (None, true) => format!(">= {c}"),
            (None, false) => c.to_string(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {cap} | {:.0} % |\n",
            r.preset,
            r.codec,
            r.result.setup.name(),
            r.bound,
            100.0 * f64::from(c) / f64::from(r.bound.max(1))
        ));
    }
    s
}

#[cfg(test)]
#[path = "cell_sim_tests.rs"]
mod tests;
