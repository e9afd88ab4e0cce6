//! `airpack voip`: real RTP calls between lab nodes, one process per node.
//!
//! Owns: the call spec and result formats ([`Spec`], [`NodeResult`],
//! [`CallResult`]), the per-node sender/receiver ([`run`]) and the merge of
//! all nodes' results into per-call quality ([`merge`], [`summarize`]).
//! Must not touch: voice-quality math (it calls `airpack_voice`), namespaces
//! and the medium (the caller starts one `airpack voip` inside each node).
//!
//! Sockets: one UDP socket per call per local endpoint, bound to the
//! endpoint's `addr:port`; it sends that endpoint's stream to the peer's
//! `addr:port` and receives the peer's stream. Received datagrams are checked
//! (RTP parse, payload type, SSRC, payload size, call id in the probe tag);
//! anything else is counted by reason in [`RxCounters`] and ignored.
//! Every packet is marked with a DSCP (`--dscp`, default EF = 46 as phones
//! send; IP_TOS / IPV6_TCLASS on the socket), so a daemon class that selects
//! voice by DSCP matches it. A caller may hand over sockets it already bound
//! ([`RunOptions::bound`]), so tests need not release a port and bind it again.
//!
//! Timing: the sender runs on the calling thread with absolute deadlines on
//! CLOCK_MONOTONIC (`clock_nanosleep(TIMER_ABSTIME)`, no drift); packet k of
//! a stream is due at `t0 + offset + k * interval`, with a per-stream random
//! offset in `[0, interval)` so calls are not phase-aligned. A receive thread
//! waits in epoll; each datagram is timed by the kernel's receive timestamp
//! (SO_TIMESTAMPNS, CLOCK_REALTIME converted to CLOCK_MONOTONIC with an
//! offset taken at start), or by CLOCK_MONOTONIC read right after `recv`
//! when the kernel gives none or an implausible one (counted). The sender writes its CLOCK_MONOTONIC time (µs) into the
//! payload just before `send`; all network namespaces share that clock.
//!
//! Voice activity (`vad: true`): per stream, talk spurts and silences with
//! exponentially distributed lengths (means 1.0 s and 1.5 s), seeded from
//! (`seed`, call id, direction); the first state is drawn from the stationary
//! distribution. No packets during silence; the RTP marker bit is set on the
//! first packet of each spurt. RTP timestamps advance through silences.
//!
//! RTCP ([`rtcp`], on by default in `airpack voip`, off in
//! [`RunOptions::default`]): SR/RR + SDES CNAME on the RTP port + 1 every
//! ~5 s (`--rtcp-interval-ms`), BYE at the end; the peer's reports give the
//! round-trip time and its view of our stream's loss and jitter, reported
//! per stream (`rtcp`), per call (`a_to_b_rtcp`, `b_to_a_rtcp`) and in the
//! summary (`rtt_ms`, `rtcp_loss_pct`, `rtcp_jitter_ms`). Existing fields do
//! not change; RTP counters (`rx`) do not count RTCP datagrams.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use airpack_voice::codec::{Codec, Profile};
use airpack_voice::stats::{self, Quality, ReceiveSummary};

pub use airpack_voice::stats::{BurstModel, Criterion};

mod rtcp;
mod run;
pub use rtcp::{PeerView, RtcpCounters, RtcpOptions, StreamRtcp, DEFAULT_RTCP_INTERVAL_MS};
pub use run::{monotonic_us, run, run_with};

/// Longest call duration accepted (s).
pub const MAX_DURATION_S: f64 = 3600.0;
/// Most calls in one spec.
pub const MAX_CALLS: usize = 10_000;
/// How far in the future `start_at_unix_ms` may be.
pub const MAX_START_WAIT: Duration = Duration::from_secs(600);

/// `airpack voip` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct VoipArgs {
    /// Call spec (JSON, see docs/voice.md).
    #[arg(long)]
    pub spec: PathBuf,
    /// This node's name in the spec.
    #[arg(long, required_unless_present = "merge")]
    pub node: Option<String>,
    /// Where to write this node's result JSON.
    #[arg(long, required_unless_present = "merge")]
    pub out: Option<PathBuf>,
    /// Instead of running: merge these node result files and print per-call
    /// quality as JSON on stdout.
    #[arg(long, num_args = 1.., conflicts_with_all = ["node", "out"])]
    pub merge: Vec<PathBuf>,
    /// DSCP (0-63) of every packet sent; default EF (46), what phones mark
    /// voice with. 0 sends unmarked packets.
    #[arg(long, default_value_t = DEFAULT_DSCP, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: u8,
    /// RTCP on the RTP port + 1: "on" (as phones do) or "off".
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub rtcp: String,
    /// Minimum RTCP report interval (ms); RFC 3550's is 5000. Reports go out
    /// at 0.5-1.5 times it divided by e - 3/2 (RFC 3550 appendix A.7).
    #[arg(long, default_value_t = DEFAULT_RTCP_INTERVAL_MS, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub rtcp_interval_ms: u64,
}

/// DSCP `airpack voip` marks its packets with unless told otherwise: EF.
pub const DEFAULT_DSCP: u8 = 46;

/// How [`run_with`] runs one node.
#[derive(Debug)]
pub struct RunOptions {
    /// DSCP (0-63) of every packet sent.
    pub dscp: u8,
    /// Sockets already bound to some of this node's endpoints; an endpoint
    /// whose `addr:port` one of them is bound to uses it instead of binding.
    pub bound: Vec<UdpSocket>,
    /// RTCP (off by default here; `airpack voip` turns it on). Bound sockets
    /// may include the RTCP ports (RTP port + 1).
    pub rtcp: RtcpOptions,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            dscp: DEFAULT_DSCP,
            bound: Vec::new(),
            rtcp: RtcpOptions::OFF,
        }
    }
}

/// Entry point of `airpack voip`.
pub fn main(args: VoipArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.spec)
        .with_context(|| format!("reading spec {}", args.spec.display()))?;
    let spec: Spec = serde_json::from_str(&text)
        .with_context(|| format!("parsing spec {}", args.spec.display()))?;
    if !args.merge.is_empty() {
        let mut results = Vec::new();
        for p in &args.merge {
            let t =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            results.push(
                serde_json::from_str::<NodeResult>(&t)
                    .with_context(|| format!("parsing {}", p.display()))?,
            );
        }
        let calls = merge(&spec, &results);
        let out = serde_json::json!({ "summary": summarize(&calls), "calls": calls });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let (Some(node), Some(out)) = (args.node, args.out) else {
        bail!("--node and --out are required");
    };
    let rtcp = RtcpOptions {
        enabled: args.rtcp == "on",
        interval_ms: args.rtcp_interval_ms,
    };
    let result = run_with(
        &spec,
        &node,
        RunOptions {
            dscp: args.dscp,
            bound: Vec::new(),
            rtcp,
        },
    )?;
    let tmp = out.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&result)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("writing {}", out.display()))?;
    let sent: u64 = result.streams.iter().filter_map(|s| s.sent).sum();
    let recv: u64 = result
        .streams
        .iter()
        .filter_map(|s| s.received.as_ref().map(|r| r.received))
        .sum();
    let rtt: Vec<f64> = result
        .streams
        .iter()
        .filter_map(|s| s.rtcp.as_ref()?.peer_view.rtt_mean_ms)
        .collect();
    let rtt = if rtt.is_empty() {
        String::new()
    } else {
        format!(
            ", RTCP RTT mean {:.2} ms",
            rtt.iter().sum::<f64>() / rtt.len() as f64
        )
    };
    eprintln!(
        "airpack voip: node {node}: {} streams, sent {sent}, received {recv}, rejected {}{rtt}",
        result.streams.len(),
        result.rx.rejected()
    );
    Ok(())
}

/// The call spec shared by every node of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// Codec: "g729" (alias "g729a"), "g711" ("pcmu"), "g711-noplc", "g723".
    pub codec: Codec,
    /// Packet interval (ms), a multiple of the codec frame.
    #[serde(default = "default_interval")]
    pub interval_ms: u32,
    /// On/off voice activity instead of constant bit rate.
    #[serde(default)]
    pub vad: bool,
    /// Seed of the voice-activity and phase randomness.
    #[serde(default)]
    pub seed: u64,
    /// How long every stream sends (s).
    pub duration_s: f64,
    /// When sending starts (Unix time, ms); absent: at once.
    #[serde(default)]
    pub start_at_unix_ms: Option<u64>,
    /// Playout buffer (ms) for late loss.
    #[serde(default = "default_playout")]
    pub playout_ms: f64,
    /// Support criterion: "mos" (default) or "seeds".
    #[serde(default)]
    pub criterion: Criterion,
    /// BurstR in the E-model: "random" (default, BurstR = 1) or "measured"
    /// (from the loss pattern).
    #[serde(default)]
    pub burst: BurstModel,
    /// MOS threshold for the "mos" criterion.
    #[serde(default = "default_min_mos")]
    pub min_mos: f64,
    /// Receive time after the last send (ms).
    #[serde(default = "default_grace")]
    pub grace_ms: u64,
    /// Mean talk-spurt length (s) with `vad`.
    #[serde(default = "default_talk")]
    pub talk_mean_s: f64,
    /// Mean silence length (s) with `vad`.
    #[serde(default = "default_silence")]
    pub silence_mean_s: f64,
    /// The calls.
    pub calls: Vec<CallSpec>,
}

fn default_interval() -> u32 {
    20
}
fn default_playout() -> f64 {
    60.0
}
fn default_min_mos() -> f64 {
    stats::DEFAULT_MIN_MOS
}
fn default_grace() -> u64 {
    1000
}
fn default_talk() -> f64 {
    1.0
}
fn default_silence() -> f64 {
    1.5
}

/// One call: two endpoints, one stream each way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSpec {
    /// Call id (unique in the spec).
    pub id: u32,
    /// Endpoint a.
    pub a: Endpoint,
    /// Endpoint b.
    pub b: Endpoint,
}

/// A call endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Node name (matches `--node`).
    pub node: String,
    /// Address of the node the endpoint binds and the peer sends to.
    pub addr: IpAddr,
    /// UDP port of this endpoint.
    pub port: u16,
}

impl Endpoint {
    fn sockaddr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.port)
    }
}

/// Stream direction within a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// From endpoint a to endpoint b.
    AToB,
    /// From endpoint b to endpoint a.
    BToA,
}

impl Direction {
    fn index(self) -> u32 {
        match self {
            Direction::AToB => 0,
            Direction::BToA => 1,
        }
    }
}

impl Spec {
    /// Codec profile at the spec's interval.
    pub fn profile(&self) -> anyhow::Result<Profile> {
        Ok(self.codec.profile(self.interval_ms)?)
    }

    /// Check every field; the error names the problem.
    pub fn validate(&self) -> anyhow::Result<Profile> {
        let profile = self.profile()?;
        if !(self.duration_s > 0.0 && self.duration_s <= MAX_DURATION_S) {
            bail!(
                "duration_s must be in (0, {MAX_DURATION_S}], got {}",
                self.duration_s
            );
        }
        if !(self.playout_ms >= 0.0 && self.playout_ms <= 10_000.0) {
            bail!("playout_ms must be in [0, 10000], got {}", self.playout_ms);
        }
        if self.grace_ms > 60_000 {
            bail!("grace_ms must be at most 60000, got {}", self.grace_ms);
        }
        if !(self.min_mos >= 1.0 && self.min_mos <= 4.5) {
            bail!("min_mos must be in [1, 4.5], got {}", self.min_mos);
        }
        for (name, v) in [
            ("talk_mean_s", self.talk_mean_s),
            ("silence_mean_s", self.silence_mean_s),
        ] {
            if !(0.01..=3600.0).contains(&v) {
                bail!("{name} must be in [0.01, 3600], got {v}");
            }
        }
        if self.calls.len() > MAX_CALLS {
            bail!("at most {MAX_CALLS} calls, got {}", self.calls.len());
        }
        let mut ids = std::collections::HashSet::new();
        let mut binds = std::collections::HashSet::new();
        for c in &self.calls {
            if !ids.insert(c.id) {
                bail!("call id {} appears twice", c.id);
            }
            for e in [&c.a, &c.b] {
                if e.node.is_empty() {
                    bail!("call {}: empty node name", c.id);
                }
                if e.port == 0 {
                    bail!("call {}: port 0 on node {}", c.id, e.node);
                }
                if !binds.insert((e.node.clone(), e.addr, e.port)) {
                    bail!(
                        "call {}: {}:{} on node {} is used by another endpoint",
                        c.id,
                        e.addr,
                        e.port,
                        e.node
                    );
                }
            }
        }
        Ok(profile)
    }
}

/// Deterministic SSRC of a stream.
pub fn ssrc_of(seed: u64, call: u32, dir: Direction) -> u32 {
    (splitmix(seed ^ splitmix(u64::from(call) << 1 | u64::from(dir.index()))) >> 32) as u32
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What one node reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    /// Node name.
    pub node: String,
    /// How late this node started after `start_at_unix_ms` (ms; 0 when on
    /// time). A late node's streams are shifted by that much.
    #[serde(default)]
    pub start_late_ms: f64,
    /// One entry per local stream: senders carry `sent`, receivers `received`.
    pub streams: Vec<StreamReport>,
    /// Datagrams received and rejected, by reason.
    #[serde(default)]
    pub rx: RxCounters,
    /// RTCP receive counters (absent when RTCP is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp: Option<RtcpCounters>,
}

/// One stream's report from one side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    /// Call id.
    pub call: u32,
    /// Direction of the stream.
    pub direction: Direction,
    /// Sender side: packets produced (including `send_errors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    /// Sender side: packets the local stack refused (counted as lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_errors: Option<u64>,
    /// Sender side: largest lateness of a send behind its schedule (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_send_lag_ms: Option<f64>,
    /// Sender side: packets sent more than 1 ms behind schedule (the tool
    /// itself could not keep up; they show in `jitter_rtp_ms`, not in delay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sends_late_1ms: Option<u64>,
    /// Receiver side: raw receive statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<ReceiveSummary>,
    /// Sender side, with RTCP on: reports sent and received, and the peer's
    /// view of this stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp: Option<StreamRtcp>,
}

/// Node-level receive counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxCounters {
    /// Datagrams read from all sockets.
    pub datagrams: u64,
    /// Accepted into a stream's statistics.
    pub accepted: u64,
    /// Not RTP, by parse error name.
    pub not_rtp: BTreeMap<String, u64>,
    /// RTP with another payload type than the codec's.
    pub wrong_payload_type: u64,
    /// RTP with an SSRC not expected on that socket.
    pub wrong_ssrc: u64,
    /// Payload size differs from the codec's.
    pub wrong_payload_size: u64,
    /// Probe tag carries another call id.
    pub wrong_call: u64,
    /// Socket receive errors other than "would block".
    pub recv_errors: u64,
    /// Datagrams longer than the receive buffer (dropped).
    #[serde(default)]
    pub truncated: u64,
    /// Datagrams timed by the kernel's receive timestamp (SO_TIMESTAMPNS).
    #[serde(default)]
    pub kernel_timestamps: u64,
    /// Datagrams timed by our clock read after `recv` (no or implausible
    /// kernel timestamp).
    #[serde(default)]
    pub user_timestamps: u64,
}

impl RxCounters {
    /// Datagrams rejected for any reason.
    pub fn rejected(&self) -> u64 {
        self.not_rtp.values().sum::<u64>()
            + self.truncated
            + self.wrong_payload_type
            + self.wrong_ssrc
            + self.wrong_payload_size
            + self.wrong_call
    }
}

/// Merged quality of one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    /// Call id.
    pub call: u32,
    /// Stream a -> b.
    pub a_to_b: Quality,
    /// Stream b -> a.
    pub b_to_a: Quality,
    /// Both directions supported.
    pub supported: bool,
    /// Problems found while merging (missing reports, invalid spec).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// With RTCP: what b reported about stream a -> b (and the RTT a saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a_to_b_rtcp: Option<PeerView>,
    /// With RTCP: what a reported about stream b -> a (and the RTT b saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_to_a_rtcp: Option<PeerView>,
}

/// Combine every node's result into per-call quality. Pure. A missing
/// sender report counts as nothing sent, a missing receiver report as
/// nothing received; both make the direction unsupported and add a note.
/// A direction whose sender reported zero packets (silent under voice
/// activity) and that received nothing is supported: there is nothing to judge.
pub fn merge(spec: &Spec, results: &[NodeResult]) -> Vec<CallResult> {
    let profile = match spec.profile() {
        Ok(p) => Ok(p),
        Err(e) => Err(format!("invalid spec: {e}")),
    };
    let find = |node: &str, call: u32, dir: Direction, sender: bool| {
        results
            .iter()
            .filter(|r| r.node == node)
            .flat_map(|r| r.streams.iter())
            .find(|s| {
                s.call == call
                    && s.direction == dir
                    && (s.sent.is_some() == sender)
                    && (s.received.is_some() != sender)
            })
    };
    spec.calls
        .iter()
        .map(|c| {
            let mut notes = Vec::new();
            let mut one = |dir: Direction, src: &Endpoint, dst: &Endpoint| {
                let sender = find(&src.node, c.id, dir, true);
                let sent = match sender {
                    Some(s) => s.sent.unwrap_or(0),
                    None => {
                        notes.push(format!("{dir:?}: no sender report from node {}", src.node));
                        0
                    }
                };
                // Voice activity can keep a direction silent for a whole short run:
                // the sender reported, sent nothing, and nothing arrived. There is no
                // speech to judge, so the direction cannot fail the call.
                let silent = sender.is_some() && sent == 0;
                let rx = match find(&dst.node, c.id, dir, false) {
                    Some(s) => s.received.clone().unwrap_or_default(),
                    None => {
                        notes.push(format!(
                            "{dir:?}: no receiver report from node {}",
                            dst.node
                        ));
                        ReceiveSummary {
                            playout_ms: spec.playout_ms,
                            ..Default::default()
                        }
                    }
                };
                let opts = stats::AssessOptions {
                    criterion: spec.criterion,
                    min_mos: spec.min_mos,
                    burst: spec.burst,
                };
                match &profile {
                    Ok(p) => {
                        let mut q = stats::assess_with(sent, &rx, p, &opts);
                        if silent && rx.received == 0 {
                            q.supported = true;
                            notes.push(format!("{dir:?}: silent (voice activity sent nothing)"));
                        }
                        q
                    }
                    Err(e) => {
                        notes.push(e.clone());
                        let fallback = Codec::G729.profile(20).expect("20 ms G.729 is valid");
                        let mut q = stats::assess_with(sent, &rx, &fallback, &opts);
                        q.supported = false;
                        q
                    }
                }
            };
            let a_to_b = one(Direction::AToB, &c.a, &c.b);
            let b_to_a = one(Direction::BToA, &c.b, &c.a);
            notes.dedup();
            let view = |dir: Direction, src: &Endpoint| {
                find(&src.node, c.id, dir, true)
                    .and_then(|s| s.rtcp.as_ref())
                    .map(|r| r.peer_view.clone())
            };
            CallResult {
                call: c.id,
                supported: a_to_b.supported && b_to_a.supported,
                a_to_b,
                b_to_a,
                notes,
                a_to_b_rtcp: view(Direction::AToB, &c.a),
                b_to_a_rtcp: view(Direction::BToA, &c.b),
            }
        })
        .collect()
}

/// Aggregate view of a set of calls (one measured point of an experiment).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Calls in the point.
    pub calls: usize,
    /// Calls with both directions supported.
    pub supported_calls: usize,
    /// Every call supported.
    pub all_supported: bool,
    /// Mean MOS over all directions.
    pub mos_mean: f64,
    /// Lowest MOS of any direction.
    pub mos_min: f64,
    /// Mean network loss over directions (%).
    pub loss_pct: f64,
    /// Mean network loss of the a -> b directions (%).
    #[serde(default)]
    pub loss_a_to_b_pct: f64,
    /// Mean network loss of the b -> a directions (%).
    #[serde(default)]
    pub loss_b_to_a_pct: f64,
    /// Highest network loss of any one direction (%): a one-way loss that
    /// the mean over both directions halves.
    #[serde(default)]
    pub loss_max_pct: f64,
    /// Mean late loss over directions (%).
    pub late_pct: f64,
    /// Mean of the directions' mean one-way delays (ms), over directions that received.
    pub delay_ms: Option<f64>,
    /// Median over directions of their median one-way delays (ms).
    pub delay_p50_ms: Option<f64>,
    /// Highest p95 one-way delay of any direction (ms).
    pub delay_p95_ms: Option<f64>,
    /// Mean over directions of the RFC 3550 jitter at the end of the call (ms).
    pub jitter_ms: f64,
    /// Mean over directions of each direction's mean jitter over the call (ms).
    #[serde(default)]
    pub jitter_mean_ms: f64,
    /// Highest jitter any direction reached during its call (ms).
    #[serde(default)]
    pub jitter_max_ms: f64,
    /// RTCP: mean over directions of their mean round-trip time (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    /// RTCP: largest round-trip time of any direction (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_max_ms: Option<f64>,
    /// RTCP: mean over directions of the receiver-reported cumulative loss
    /// of the last report, as a percentage of the packets sent (%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp_loss_pct: Option<f64>,
    /// RTCP: mean over directions of the receiver-reported jitter (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp_jitter_ms: Option<f64>,
}

/// Summarize merged calls. An empty set gives zero calls, all supported.
pub fn summarize(calls: &[CallResult]) -> Summary {
    let dirs: Vec<&Quality> = calls.iter().flat_map(|c| [&c.a_to_b, &c.b_to_a]).collect();
    let n = dirs.len().max(1) as f64;
    let delays: Vec<f64> = dirs.iter().filter_map(|q| q.delay_ms).collect();
    // Directions with an RTCP view that holds at least one report.
    let views: Vec<(&Quality, &PeerView)> = calls
        .iter()
        .flat_map(|c| {
            [
                (&c.a_to_b, c.a_to_b_rtcp.as_ref()),
                (&c.b_to_a, c.b_to_a_rtcp.as_ref()),
            ]
        })
        .filter_map(|(q, v)| Some((q, v.filter(|v| v.reports > 0)?)))
        .collect();
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Summary {
        rtt_ms: mean(views.iter().filter_map(|(_, v)| v.rtt_mean_ms).collect()),
        rtt_max_ms: views
            .iter()
            .filter_map(|(_, v)| v.rtt_max_ms)
            .reduce(f64::max),
        rtcp_loss_pct: mean(
            views
                .iter()
                .filter(|(q, _)| q.sent > 0)
                .map(|(q, v)| 100.0 * v.cumulative_lost as f64 / q.sent as f64)
                .collect(),
        ),
        rtcp_jitter_ms: mean(views.iter().map(|(_, v)| v.jitter_ms).collect()),
        calls: calls.len(),
        supported_calls: calls.iter().filter(|c| c.supported).count(),
        all_supported: calls.iter().all(|c| c.supported),
        mos_mean: if dirs.is_empty() {
            0.0
        } else {
            dirs.iter().map(|q| q.mos).sum::<f64>() / n
        },
        mos_min: dirs
            .iter()
            .map(|q| q.mos)
            .fold(f64::INFINITY, f64::min)
            .min(4.5),
        loss_pct: dirs.iter().map(|q| q.loss_pct).sum::<f64>() / n,
        loss_a_to_b_pct: calls.iter().map(|c| c.a_to_b.loss_pct).sum::<f64>()
            / calls.len().max(1) as f64,
        loss_b_to_a_pct: calls.iter().map(|c| c.b_to_a.loss_pct).sum::<f64>()
            / calls.len().max(1) as f64,
        loss_max_pct: dirs.iter().map(|q| q.loss_pct).fold(0.0, f64::max),
        late_pct: dirs.iter().map(|q| q.late_pct).sum::<f64>() / n,
        delay_ms: (!delays.is_empty()).then(|| delays.iter().sum::<f64>() / delays.len() as f64),
        delay_p50_ms: median(dirs.iter().filter_map(|q| q.delay_p50_ms).collect()),
        delay_p95_ms: dirs.iter().filter_map(|q| q.delay_p95_ms).reduce(f64::max),
        jitter_ms: dirs.iter().map(|q| q.jitter_ms).sum::<f64>() / n,
        jitter_mean_ms: dirs.iter().map(|q| q.jitter_mean_ms).sum::<f64>() / n,
        jitter_max_ms: dirs.iter().map(|q| q.jitter_max_ms).fold(0.0, f64::max),
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests;
