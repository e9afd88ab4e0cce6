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

use std::collections::{BTreeMap, BinaryHeap};
use std::cmp::Reverse;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use std::sync::atomic::{AtomicU64, Ordering};

use airpack_voice::codec::{Codec, Profile};
use airpack_voice::rtcp::ReceptionStats;
use airpack_voice::rtp::{self, ProbeTag, RtpHeader};
use airpack_voice::stats::{self, Quality, ReceiveSummary, StreamStats};

pub use airpack_voice::stats::{BurstModel, Criterion};

mod rtcp;
pub use rtcp::{PeerView, RtcpCounters, RtcpOptions, StreamRtcp, DEFAULT_RTCP_INTERVAL_MS};

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
        Self { dscp: DEFAULT_DSCP, bound: Vec::new(), rtcp: RtcpOptions::OFF }
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
            let t = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
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
    let rtcp = RtcpOptions { enabled: args.rtcp == "on", interval_ms: args.rtcp_interval_ms };
    let result = run_with(&spec, &node, RunOptions { dscp: args.dscp, bound: Vec::new(), rtcp })?;
    let tmp = out.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&result)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("writing {}", out.display()))?;
    let sent: u64 = result.streams.iter().filter_map(|s| s.sent).sum();
    let recv: u64 = result.streams.iter().filter_map(|s| s.received.as_ref().map(|r| r.received)).sum();
    let rtt: Vec<f64> = result.streams.iter().filter_map(|s| s.rtcp.as_ref()?.peer_view.rtt_mean_ms).collect();
    let rtt = if rtt.is_empty() { String::new() } else { format!(", RTCP RTT mean {:.2} ms", rtt.iter().sum::<f64>() / rtt.len() as f64) };
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
            bail!("duration_s must be in (0, {MAX_DURATION_S}], got {}", self.duration_s);
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
        for (name, v) in [("talk_mean_s", self.talk_mean_s), ("silence_mean_s", self.silence_mean_s)] {
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
                    bail!("call {}: {}:{} on node {} is used by another endpoint", c.id, e.addr, e.port, e.node);
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
            .find(|s| s.call == call && s.direction == dir && (s.sent.is_some() == sender) && (s.received.is_some() != sender))
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
                        notes.push(format!("{dir:?}: no receiver report from node {}", dst.node));
                        ReceiveSummary { playout_ms: spec.playout_ms, ..Default::default() }
                    }
                };
                let opts = stats::AssessOptions { criterion: spec.criterion, min_mos: spec.min_mos, burst: spec.burst };
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
                find(&src.node, c.id, dir, true).and_then(|s| s.rtcp.as_ref()).map(|r| r.peer_view.clone())
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
        .flat_map(|c| [(&c.a_to_b, c.a_to_b_rtcp.as_ref()), (&c.b_to_a, c.b_to_a_rtcp.as_ref())])
        .filter_map(|(q, v)| Some((q, v.filter(|v| v.reports > 0)?)))
        .collect();
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Summary {
        rtt_ms: mean(views.iter().filter_map(|(_, v)| v.rtt_mean_ms).collect()),
        rtt_max_ms: views.iter().filter_map(|(_, v)| v.rtt_max_ms).reduce(f64::max),
        rtcp_loss_pct: mean(
            views.iter().filter(|(q, _)| q.sent > 0).map(|(q, v)| 100.0 * v.cumulative_lost as f64 / q.sent as f64).collect(),
        ),
        rtcp_jitter_ms: mean(views.iter().map(|(_, v)| v.jitter_ms).collect()),
        calls: calls.len(),
        supported_calls: calls.iter().filter(|c| c.supported).count(),
        all_supported: calls.iter().all(|c| c.supported),
        mos_mean: if dirs.is_empty() { 0.0 } else { dirs.iter().map(|q| q.mos).sum::<f64>() / n },
        mos_min: dirs.iter().map(|q| q.mos).fold(f64::INFINITY, f64::min).min(4.5),
        loss_pct: dirs.iter().map(|q| q.loss_pct).sum::<f64>() / n,
        loss_a_to_b_pct: calls.iter().map(|c| c.a_to_b.loss_pct).sum::<f64>() / calls.len().max(1) as f64,
        loss_b_to_a_pct: calls.iter().map(|c| c.b_to_a.loss_pct).sum::<f64>() / calls.len().max(1) as f64,
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
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

// ---------------------------------------------------------------- runtime

/// CLOCK_MONOTONIC in µs.
pub fn monotonic_us() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000
}

fn sleep_until_monotonic_us(deadline_us: u64) {
    let ts = nix::sys::time::TimeSpec::new(
        (deadline_us / 1_000_000) as i64,
        ((deadline_us % 1_000_000) * 1000) as i64,
    );
    loop {
        match nix::time::clock_nanosleep(
            nix::time::ClockId::CLOCK_MONOTONIC,
            nix::time::ClockNanosleepFlags::TIMER_ABSTIME,
            &ts,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return,
        }
    }
}

/// A stream this node receives.
struct RxStream {
    call: u32,
    dir: Direction,
    ssrc: u32,
    stats: StreamStats,
    /// RFC 3550 A.1 reception state, for RTCP report blocks.
    reception: ReceptionStats,
}

/// A stream this node sends.
struct TxStream {
    call: u32,
    dir: Direction,
    socket: usize,
    peer: SocketAddr,
    ssrc: u32,
    seq: u16,
    ts0: u32,
    offset_us: u64,
    next_k: u64,
    rng: SmallRng,
    talking: bool,
    state_end_us: u64,
    marker_next: bool,
    sent: u64,
    send_errors: u64,
    max_lag_us: u64,
    late_sends: u64,
}

struct VadModel {
    on: bool,
    talk_mean_us: f64,
    silence_mean_us: f64,
}

fn exp_sample(rng: &mut SmallRng, mean_us: f64) -> u64 {
    let u: f64 = rng.gen::<f64>();
    // 1 - u is in (0, 1]: ln is finite.
    ((-(1.0 - u).ln() * mean_us) as u64).max(1)
}

impl TxStream {
    /// Time (µs after t0) of the next packet to send, advancing the voice
    /// activity state; `None` when past the duration.
    fn next_due(&mut self, interval_us: u64, duration_us: u64, vad: &VadModel) -> Option<u64> {
        loop {
            let t = self.offset_us + self.next_k * interval_us;
            if t >= duration_us {
                return None;
            }
            if !vad.on {
                return Some(t);
            }
            while self.state_end_us <= t {
                self.talking = !self.talking;
                let mean = if self.talking { vad.talk_mean_us } else { vad.silence_mean_us };
                self.state_end_us += exp_sample(&mut self.rng, mean);
                if self.talking {
                    self.marker_next = true;
                }
            }
            if self.talking {
                return Some(t);
            }
            // Skip to the first grid point at or after the silence's end.
            let end = self.state_end_us.saturating_sub(self.offset_us);
            self.next_k = end.div_ceil(interval_us).max(self.next_k + 1);
        }
    }
}

/// Run this node's part of the spec: send and receive until the end of the
/// duration plus grace, and return its report. Packets carry DSCP EF.
pub fn run(spec: &Spec, node: &str) -> anyhow::Result<NodeResult> {
    run_with(spec, node, RunOptions::default())
}

/// Mark every packet a socket sends with `dscp` (IPv4 TOS or IPv6 traffic
/// class; the ECN bits stay 0).
fn set_dscp(sock: &UdpSocket, dscp: u8) -> anyhow::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    let tos = i32::from(dscp) << 2;
    match sock.local_addr()? {
        SocketAddr::V4(_) => setsockopt(sock, sockopt::IpTos, &tos)?,
        SocketAddr::V6(_) => setsockopt(sock, sockopt::Ipv6TClass, &tos)?,
    }
    Ok(())
}

/// [`run`] with options: the DSCP, and sockets the caller already bound.
pub fn run_with(spec: &Spec, node: &str, opts: RunOptions) -> anyhow::Result<NodeResult> {
    let profile = spec.validate()?;
    let params = profile.params();
    if opts.dscp > 63 {
        bail!("dscp must be in 0..=63, got {}", opts.dscp);
    }
    let mut bound = opts.bound;
    if opts.rtcp.enabled {
        // RTCP goes to the RTP port + 1 of both ends: it must not be an RTP port.
        let rtp_binds: std::collections::HashSet<(&str, IpAddr, u16)> =
            spec.calls.iter().flat_map(|c| [&c.a, &c.b]).map(|e| (e.node.as_str(), e.addr, e.port)).collect();
        for c in &spec.calls {
            for e in [&c.a, &c.b] {
                if rtp_binds.contains(&(e.node.as_str(), e.addr, e.port.wrapping_add(1))) {
                    bail!("call {}: RTCP port {} on node {} is another endpoint's RTP port (use even RTP ports, or --rtcp off)", c.id, e.port.wrapping_add(1), e.node);
                }
            }
        }
    }

    // Local endpoints: one socket each.
    let mut sockets: Vec<UdpSocket> = Vec::new();
    let mut rx_streams: Vec<RxStream> = Vec::new(); // index = socket index
    let mut tx_streams: Vec<TxStream> = Vec::new();
    for c in &spec.calls {
        for (me, peer, out_dir, in_dir) in [
            (&c.a, &c.b, Direction::AToB, Direction::BToA),
            (&c.b, &c.a, Direction::BToA, Direction::AToB),
        ] {
            if me.node != node {
                continue;
            }
            let sock = match bound.iter().position(|b| b.local_addr().ok() == Some(me.sockaddr())) {
                Some(i) => bound.swap_remove(i),
                None => UdpSocket::bind(me.sockaddr())
                    .with_context(|| format!("call {}: binding {}", c.id, me.sockaddr()))?,
            };
            sock.set_nonblocking(true)?;
            set_dscp(&sock, opts.dscp).with_context(|| format!("call {}: setting DSCP {}", c.id, opts.dscp))?;
            let idx = sockets.len();
            sockets.push(sock);
            rx_streams.push(RxStream {
                call: c.id,
                dir: in_dir,
                ssrc: ssrc_of(spec.seed, c.id, in_dir),
                stats: StreamStats::new(params.clock_rate, spec.playout_ms)
                    .with_timestamp_step(profile.timestamp_step()),
                reception: ReceptionStats::new(params.clock_rate),
            });
            let mut rng = SmallRng::seed_from_u64(splitmix(
                spec.seed ^ splitmix(u64::from(c.id) << 1 | u64::from(out_dir.index())),
            ));
            let offset_us = rng.gen_range(0..profile.interval_us());
            let p_talk = spec.talk_mean_s / (spec.talk_mean_s + spec.silence_mean_s);
            let talking = !spec.vad || rng.gen::<f64>() < p_talk;
            let first_mean = if talking { spec.talk_mean_s } else { spec.silence_mean_s } * 1e6;
            let state_end_us = if spec.vad { exp_sample(&mut rng, first_mean) } else { u64::MAX };
            tx_streams.push(TxStream {
                call: c.id,
                dir: out_dir,
                socket: idx,
                peer: peer.sockaddr(),
                ssrc: ssrc_of(spec.seed, c.id, out_dir),
                seq: rng.gen(),
                ts0: rng.gen(),
                offset_us,
                next_k: 0,
                rng,
                talking,
                state_end_us,
                marker_next: talking,
                sent: 0,
                send_errors: 0,
                max_lag_us: 0,
                late_sends: 0,
            });
        }
    }

    if sockets.is_empty() {
        bail!("node {node:?} is not an endpoint of any call in the spec");
    }
    // RTCP: one socket per local endpoint on the RTP port + 1.
    let mut rtcp_calls = Vec::new();
    if opts.rtcp.enabled {
        if opts.rtcp.interval_ms == 0 {
            bail!("the RTCP interval must be positive");
        }
        for (ti, t) in tx_streams.iter().enumerate() {
            let c = spec.calls.iter().find(|c| c.id == t.call).expect("streams come from the spec");
            let (me, peer) = if t.dir == Direction::AToB { (&c.a, &c.b) } else { (&c.b, &c.a) };
            let rtcp_port = |e: &Endpoint| e.port.checked_add(1);
            let (Some(my_port), Some(peer_port)) = (rtcp_port(me), rtcp_port(peer)) else {
                bail!("call {}: RTP port 65535 leaves no RTCP port (use --rtcp off)", c.id);
            };
            let addr = SocketAddr::new(me.addr, my_port);
            let sock = match bound.iter().position(|b| b.local_addr().ok() == Some(addr)) {
                Some(i) => bound.swap_remove(i),
                None => UdpSocket::bind(addr).with_context(|| format!("call {}: binding RTCP {addr}", c.id))?,
            };
            sock.set_nonblocking(true)?;
            set_dscp(&sock, opts.dscp).with_context(|| format!("call {}: setting DSCP {}", c.id, opts.dscp))?;
            let in_dir = if t.dir == Direction::AToB { Direction::BToA } else { Direction::AToB };
            let rng = SmallRng::seed_from_u64(splitmix(spec.seed ^ splitmix(u64::from(c.id) << 2 | 2 | u64::from(t.dir.index()))));
            rtcp_calls.push(rtcp::RtcpCall::new(
                sock,
                SocketAddr::new(peer.addr, peer_port),
                t.socket,
                ti,
                t.ssrc,
                ssrc_of(spec.seed, c.id, in_dir),
                format!("airpack-voip-{}@{}", c.id, me.addr),
                t.ts0,
                t.offset_us,
                rng,
            ));
        }
    }

    // Start time: the common start if it is ahead, else now (recorded).
    let now_mono = monotonic_us();
    let mut start_late_ms = 0.0;
    let t0 = match spec.start_at_unix_ms {
        None => now_mono,
        Some(at_ms) => {
            let now_unix_us = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() as u64;
            let at_us = at_ms.saturating_mul(1000);
            let wait = at_us.saturating_sub(now_unix_us);
            if wait > MAX_START_WAIT.as_micros() as u64 {
                bail!("start_at_unix_ms is {} s in the future (max {} s)", wait / 1_000_000, MAX_START_WAIT.as_secs());
            }
            let late_us = now_unix_us.saturating_sub(at_us);
            if late_us > 0 {
                start_late_ms = late_us as f64 / 1000.0;
                eprintln!("airpack voip: node {node}: started {start_late_ms:.1} ms after start_at_unix_ms");
            }
            now_mono + wait
        }
    };
    let duration_us = (spec.duration_s * 1e6) as u64;
    let rx_end = t0 + duration_us + spec.grace_ms * 1000;
    let vad = VadModel {
        on: spec.vad,
        talk_mean_us: spec.talk_mean_s * 1e6,
        silence_mean_us: spec.silence_mean_s * 1e6,
    };

    let mut counters = RxCounters::default();
    let mut rtcp_counters = RtcpCounters::default();
    // Packets sent per send stream, read by the RTCP side for its SRs.
    let sent_counts: Vec<AtomicU64> = tx_streams.iter().map(|_| AtomicU64::new(0)).collect();
    let payload_len = rtp::probe_payload_len(profile.payload_bytes());
    let session = rtcp::Session {
        interval_ms: opts.rtcp.interval_ms,
        // Both directions: payload + RTP/UDP/IPv4 headers, per second.
        session_bw: 2.0 * (payload_len as f64 + 40.0) * profile.packets_per_second(),
        clock_rate: params.clock_rate,
        payload_len,
        t0_us: t0,
        realtime_offset_us: (realtime_minus_monotonic_ns() / 1000) as i64,
        bye_at_us: t0 + duration_us + spec.grace_ms * 500,
    };
    for c in &mut rtcp_calls {
        c.schedule(t0, &session, true);
    }
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let sockets = &sockets;
        let rx_streams = &mut rx_streams;
        let counters = &mut counters;
        let rtcp = RtcpSide { calls: &mut rtcp_calls, counters: &mut rtcp_counters, session: &session, sent: &sent_counts };
        let receiver = scope.spawn(move || receive_loop(sockets, rx_streams, counters, rtcp, &profile, rx_end));
        send_loop(sockets, &mut tx_streams, &sent_counts, &profile, &vad, t0, duration_us);
        receiver.join().map_err(|_| anyhow::anyhow!("receive thread panicked"))??;
        Ok(())
    })?;

    let mut streams = Vec::with_capacity(tx_streams.len() + rx_streams.len());
    for (i, t) in tx_streams.iter().enumerate() {
        streams.push(StreamReport {
            call: t.call,
            direction: t.dir,
            sent: Some(t.sent),
            send_errors: Some(t.send_errors),
            max_send_lag_ms: Some(t.max_lag_us as f64 / 1000.0),
            sends_late_1ms: Some(t.late_sends),
            received: None,
            rtcp: rtcp_calls.iter().find(|c| c.tx == i).map(|c| c.report.clone()),
        });
    }
    for r in &rx_streams {
        streams.push(StreamReport {
            call: r.call,
            direction: r.dir,
            sent: None,
            send_errors: None,
            max_send_lag_ms: None,
            sends_late_1ms: None,
            received: Some(r.stats.summary()),
            rtcp: None,
        });
    }
    streams.sort_by_key(|s| (s.call, s.direction));
    let rtcp = opts.rtcp.enabled.then_some(rtcp_counters);
    Ok(NodeResult { node: node.to_string(), start_late_ms, streams, rx: counters, rtcp })
}

fn send_loop(
    sockets: &[UdpSocket],
    streams: &mut [TxStream],
    sent_counts: &[AtomicU64],
    profile: &Profile,
    vad: &VadModel,
    t0: u64,
    duration_us: u64,
) {
    let interval_us = profile.interval_us();
    let step = profile.timestamp_step();
    let pt = profile.params().payload_type;
    let payload_len = rtp::probe_payload_len(profile.payload_bytes());
    let mut heap = BinaryHeap::with_capacity(streams.len());
    for (i, s) in streams.iter_mut().enumerate() {
        if let Some(t) = s.next_due(interval_us, duration_us, vad) {
            heap.push(Reverse((t, i)));
        }
    }
    let mut payload = [0u8; 2048];
    let mut buf = [0u8; 2048];
    while let Some(Reverse((due, i))) = heap.pop() {
        let deadline = t0 + due;
        if monotonic_us() < deadline {
            sleep_until_monotonic_us(deadline);
        }
        let s = &mut streams[i];
        let header = RtpHeader {
            marker: std::mem::take(&mut s.marker_next),
            payload_type: pt,
            sequence: s.seq,
            timestamp: s.ts0.wrapping_add((s.next_k as u32).wrapping_mul(step)),
            ssrc: s.ssrc,
        };
        let now = monotonic_us();
        let tag = ProbeTag { send_us: now, call_id: s.call };
        let p = &mut payload[..payload_len];
        let lag = now.saturating_sub(deadline);
        s.max_lag_us = s.max_lag_us.max(lag);
        s.late_sends += u64::from(lag > 1000);
        s.sent += 1;
        // Sizes are bounded (payload <= 960 bytes < 2048), so building the
        // packet cannot fail; if it ever did, it counts as a send error.
        match tag.write_payload(p).and_then(|_| rtp::write(&header, p, &mut buf)) {
            Some(n) => {
                if sockets[s.socket].send_to(&buf[..n], s.peer).is_err() {
                    s.send_errors += 1;
                }
            }
            None => s.send_errors += 1,
        }
        sent_counts[i].store(s.sent, Ordering::Relaxed);
        s.seq = s.seq.wrapping_add(1);
        s.next_k += 1;
        if let Some(t) = s.next_due(interval_us, duration_us, vad) {
            heap.push(Reverse((t, i)));
        }
    }
}

/// Offset CLOCK_REALTIME - CLOCK_MONOTONIC in ns, to convert the kernel's
/// receive timestamps (SO_TIMESTAMPNS is CLOCK_REALTIME) to CLOCK_MONOTONIC.
fn realtime_minus_monotonic_ns() -> i128 {
    use nix::time::{clock_gettime, ClockId};
    let ns = |t: nix::sys::time::TimeSpec| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec());
    let (Ok(m0), Ok(rt), Ok(m1)) = (
        clock_gettime(ClockId::CLOCK_MONOTONIC),
        clock_gettime(ClockId::CLOCK_REALTIME),
        clock_gettime(ClockId::CLOCK_MONOTONIC),
    ) else {
        return 0;
    };
    ns(rt) - (ns(m0) + ns(m1)) / 2
}

/// What the receive thread needs for RTCP: it sends the reports too (at
/// their deadlines, between datagrams), so the reception state stays in one
/// thread.
struct RtcpSide<'a> {
    calls: &'a mut [rtcp::RtcpCall],
    counters: &'a mut RtcpCounters,
    session: &'a rtcp::Session,
    sent: &'a [AtomicU64],
}

impl RtcpSide<'_> {
    /// Send every report due at `now`; the last one (with BYE) at the
    /// session's `bye_at_us`. Returns the next deadline.
    fn send_due(&mut self, now: u64, streams: &mut [RxStream]) -> Option<u64> {
        let mut next = None;
        for c in self.calls.iter_mut() {
            if c.report.bye_sent {
                continue;
            }
            let bye = now >= self.session.bye_at_us;
            if bye || now >= c.next_due_us {
                let sent = self.sent.get(c.tx).map_or(0, |a| a.load(Ordering::Relaxed));
                if let Some(rx) = streams.get_mut(c.rx) {
                    c.send(now, self.session, sent, &mut rx.reception, bye, self.counters);
                }
                if bye {
                    c.report.bye_sent = true;
                    continue;
                }
            }
            let due = c.next_due_us.min(self.session.bye_at_us);
            next = Some(next.map_or(due, |n: u64| n.min(due)));
        }
        next
    }
}

fn receive_loop(
    sockets: &[UdpSocket],
    streams: &mut [RxStream],
    counters: &mut RxCounters,
    mut rtcp: RtcpSide<'_>,
    profile: &Profile,
    end_us: u64,
) -> anyhow::Result<()> {
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
    use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
    use std::os::fd::AsRawFd;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    for (i, s) in sockets.iter().enumerate() {
        // Kernel receive timestamps: arrival time without our wake-up latency.
        let _ = setsockopt(s, sockopt::ReceiveTimestampns, &true);
        epoll.add(s.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64))?;
    }
    // RTCP sockets after the RTP ones.
    let rtcp_base = sockets.len();
    for (j, c) in rtcp.calls.iter().enumerate() {
        epoll.add(c.socket.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, (rtcp_base + j) as u64))?;
    }
    let offset_ns = realtime_minus_monotonic_ns();
    let pt = profile.params().payload_type;
    let payload_len = rtp::probe_payload_len(profile.payload_bytes());
    let mut events = vec![EpollEvent::empty(); (sockets.len() + rtcp.calls.len()).clamp(1, 256)];
    let mut buf = [0u8; 2048];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    loop {
        let now = monotonic_us();
        if now >= end_us {
            return Ok(());
        }
        let next_rtcp = rtcp.send_due(now, streams);
        let until = next_rtcp.map_or(end_us, |t| t.clamp(now, end_us));
        let wait_ms = ((until - now).div_ceil(1000)).min(100) as u16;
        let n = match epoll.wait(&mut events, wait_ms) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for ev in &events[..n] {
            let idx = ev.data() as usize;
            if idx >= rtcp_base {
                if let Some(c) = rtcp.calls.get_mut(idx - rtcp_base) {
                    rtcp_drain(c, streams, rtcp.counters, rtcp.session, &mut buf);
                }
                continue;
            }
            let (Some(sock), Some(stream)) = (sockets.get(idx), streams.get_mut(idx)) else {
                continue;
            };
            // Drain, bounded per wakeup so one busy socket cannot starve others.
            for _ in 0..256 {
                let mut iov = [std::io::IoSliceMut::new(&mut buf)];
                let (len, truncated, kernel_ns) = match recvmsg::<()>(
                    sock.as_raw_fd(),
                    &mut iov,
                    Some(&mut cmsg),
                    MsgFlags::MSG_DONTWAIT,
                ) {
                    Ok(m) => {
                        let mut ts = None;
                        if let Ok(it) = m.cmsgs() {
                            for c in it {
                                if let ControlMessageOwned::ScmTimestampns(t) = c {
                                    ts = Some(i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()));
                                }
                            }
                        }
                        (m.bytes, m.flags.contains(MsgFlags::MSG_TRUNC), ts)
                    }
                    Err(nix::errno::Errno::EAGAIN) => break,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => {
                        counters.recv_errors += 1;
                        break;
                    }
                };
                let user_us = monotonic_us();
                counters.datagrams += 1;
                if truncated {
                    counters.truncated += 1;
                    continue;
                }
                let recv_us = match kernel_ns.map(|k| (k - offset_ns) / 1000) {
                    // Plausible: not after our own clock read, not a second before it.
                    Some(k) if k <= i128::from(user_us) && k + 1_000_000 >= i128::from(user_us) => {
                        counters.kernel_timestamps += 1;
                        k as u64
                    }
                    _ => {
                        counters.user_timestamps += 1;
                        user_us
                    }
                };
                accept(&buf[..len.min(buf.len())], recv_us, pt, payload_len, stream, counters);
            }
        }
    }
}

/// Read every datagram waiting on one call's RTCP socket (bounded).
fn rtcp_drain(c: &mut rtcp::RtcpCall, streams: &mut [RxStream], counters: &mut RtcpCounters, s: &rtcp::Session, buf: &mut [u8]) {
    for _ in 0..64 {
        match c.socket.recv(buf) {
            Ok(n) => {
                let now = monotonic_us();
                if let Some(rx) = streams.get_mut(c.rx) {
                    c.receive(&buf[..n.min(buf.len())], now, s, &mut rx.reception, counters);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

/// Check one datagram and feed it to its stream; count rejections.
fn accept(
    datagram: &[u8],
    recv_us: u64,
    pt: u8,
    payload_len: usize,
    stream: &mut RxStream,
    counters: &mut RxCounters,
) {
    let pkt = match rtp::parse(datagram) {
        Ok(p) => p,
        Err(e) => {
            match counters.not_rtp.get_mut(e.name()) {
                Some(n) => *n += 1,
                None => {
                    counters.not_rtp.insert(e.name().to_string(), 1);
                }
            }
            return;
        }
    };
    if pkt.header.payload_type != pt {
        counters.wrong_payload_type += 1;
        return;
    }
    if pkt.header.ssrc != stream.ssrc {
        counters.wrong_ssrc += 1;
        return;
    }
    if pkt.payload.len() != payload_len {
        counters.wrong_payload_size += 1;
        return;
    }
    let Some(tag) = ProbeTag::read(pkt.payload) else {
        counters.wrong_payload_size += 1;
        return;
    };
    if tag.call_id != stream.call {
        counters.wrong_call += 1;
        return;
    }
    counters.accepted += 1;
    stream.reception.on_rtp(pkt.header.sequence, pkt.header.timestamp, recv_us);
    stream.stats.on_packet(&stats::RxPacket {
        seq: pkt.header.sequence,
        rtp_ts: pkt.header.timestamp,
        marker: pkt.header.marker,
        send_us: tag.send_us,
        recv_us,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_json() -> &'static str {
        r#"{"codec":"g729","interval_ms":20,"vad":true,"seed":1,"duration_s":20.0,
            "start_at_unix_ms": 1763800000000, "playout_ms": 60, "criterion": "mos",
            "calls":[{"id":0,"a":{"node":"A","addr":"10.9.0.1","port":16000},
                           "b":{"node":"D","addr":"10.9.0.4","port":16000}}]}"#
    }

    #[test]
    fn contract_spec_parses_with_defaults() {
        let s: Spec = serde_json::from_str(spec_json()).unwrap();
        assert_eq!(s.codec, Codec::G729);
        assert_eq!(s.playout_ms, 60.0);
        assert_eq!(s.criterion, Criterion::Mos);
        assert_eq!(s.grace_ms, 1000);
        assert_eq!(s.calls[0].b.port, 16000);
        s.validate().unwrap();
        let seeds: Spec = serde_json::from_str(&spec_json().replace("\"mos\"", "\"seeds\"")).unwrap();
        assert_eq!(seeds.criterion, Criterion::Seeds);
    }

    #[test]
    fn invalid_specs_are_rejected_with_a_reason() {
        let base: Spec = serde_json::from_str(spec_json()).unwrap();
        let mut s = base.clone();
        s.interval_ms = 15;
        assert!(s.validate().unwrap_err().to_string().contains("10 ms frame"));
        let mut s = base.clone();
        s.duration_s = 0.0;
        assert!(s.validate().unwrap_err().to_string().contains("duration_s"));
        let mut s = base.clone();
        s.calls.push(s.calls[0].clone());
        assert!(s.validate().unwrap_err().to_string().contains("twice"));
        let mut s = base.clone();
        let mut c = s.calls[0].clone();
        c.id = 1;
        s.calls.push(c);
        assert!(s.validate().unwrap_err().to_string().contains("used by another"));
        let mut s = base;
        s.playout_ms = f64::NAN;
        assert!(s.validate().is_err());
    }

    #[test]
    fn node_result_json_matches_the_contract() {
        let r = NodeResult {
            node: "A".into(),
            start_late_ms: 0.0,
            streams: vec![
                StreamReport { call: 0, direction: Direction::AToB, sent: Some(5), send_errors: Some(0), max_send_lag_ms: Some(0.1), sends_late_1ms: Some(0), received: None, rtcp: None },
                StreamReport { call: 0, direction: Direction::BToA, sent: None, send_errors: None, max_send_lag_ms: None, sends_late_1ms: None, received: Some(ReceiveSummary::default()), rtcp: None },
            ],
            rx: RxCounters::default(),
            rtcp: None,
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["node"], "A");
        assert_eq!(v["streams"][0]["direction"], "a_to_b");
        assert_eq!(v["streams"][0]["sent"], 5);
        assert!(v["streams"][0].get("received").is_none());
        assert_eq!(v["streams"][1]["direction"], "b_to_a");
        assert!(v["streams"][1]["received"].is_object());
        let back: NodeResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    fn rx(received: u64, delay: f64) -> ReceiveSummary {
        ReceiveSummary {
            received,
            delay_min_ms: Some(delay),
            delay_mean_ms: Some(delay),
            delay_p50_ms: Some(delay),
            delay_p95_ms: Some(delay),
            delay_max_ms: Some(delay),
            playout_ms: 60.0,
            playout_delay_ms: Some(delay + 60.0),
            ..Default::default()
        }
    }

    fn report(node: &str, call: u32, dir: Direction, sent: Option<u64>, received: Option<ReceiveSummary>) -> NodeResult {
        NodeResult {
            node: node.into(),
            start_late_ms: 0.0,
            streams: vec![StreamReport { call, direction: dir, sent, send_errors: None, max_send_lag_ms: None, sends_late_1ms: None, received, rtcp: None }],
            rx: RxCounters::default(),
            rtcp: None,
        }
    }

    #[test]
    fn merge_pairs_sender_and_receiver_reports() {
        let spec: Spec = serde_json::from_str(spec_json()).unwrap();
        let results = vec![
            report("A", 0, Direction::AToB, Some(1000), None),
            report("D", 0, Direction::AToB, None, Some(rx(1000, 5.0))),
            report("D", 0, Direction::BToA, Some(1000), None),
            report("A", 0, Direction::BToA, None, Some(rx(900, 5.0))),
        ];
        let calls = merge(&spec, &results);
        assert_eq!(calls.len(), 1);
        let c = &calls[0];
        assert_eq!((c.a_to_b.sent, c.a_to_b.received, c.a_to_b.loss_pct), (1000, 1000, 0.0));
        assert!(c.a_to_b.supported);
        assert_eq!(c.b_to_a.loss_pct, 10.0);
        assert!(!c.b_to_a.supported);
        assert!(!c.supported);
        assert!(c.notes.is_empty());
        let s = summarize(&calls);
        assert_eq!((s.calls, s.supported_calls, s.all_supported), (1, 0, false));
        assert!((s.loss_pct - 5.0).abs() < 1e-9);
        // The 10 % one way is not hidden by the mean over both directions.
        assert_eq!((s.loss_a_to_b_pct, s.loss_b_to_a_pct, s.loss_max_pct), (0.0, 10.0, 10.0));
        assert_eq!(s.delay_ms, Some(5.0));
        assert_eq!(s.delay_p50_ms, Some(5.0));
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn summary_reports_mean_and_max_jitter_not_only_the_final_value() {
        let spec: Spec = serde_json::from_str(spec_json()).unwrap();
        let mut spiky = rx(1000, 5.0);
        (spiky.jitter_ms, spiky.jitter_mean_ms, spiky.jitter_max_ms) = (0.5, 23.0, 87.0);
        let mut calm = rx(1000, 5.0);
        (calm.jitter_ms, calm.jitter_mean_ms, calm.jitter_max_ms) = (0.5, 1.0, 2.0);
        let results = vec![
            report("A", 0, Direction::AToB, Some(1000), None),
            report("D", 0, Direction::AToB, None, Some(spiky)),
            report("D", 0, Direction::BToA, Some(1000), None),
            report("A", 0, Direction::BToA, None, Some(calm)),
        ];
        let calls = merge(&spec, &results);
        assert_eq!((calls[0].a_to_b.jitter_mean_ms, calls[0].a_to_b.jitter_max_ms), (23.0, 87.0));
        let s = summarize(&calls);
        assert_eq!((s.jitter_ms, s.jitter_mean_ms, s.jitter_max_ms), (0.5, 12.0, 87.0));
    }

    #[test]
    fn merge_uses_measured_burst_ratio_only_when_asked() {
        let mut spec: Spec = serde_json::from_str(spec_json()).unwrap();
        assert_eq!(spec.burst, BurstModel::Random);
        let mut lossy = rx(980, 5.0);
        lossy.burst_r = 4.0;
        let results = vec![
            report("A", 0, Direction::AToB, Some(1000), None),
            report("D", 0, Direction::AToB, None, Some(lossy)),
        ];
        let random = merge(&spec, &results);
        spec = serde_json::from_str(&spec_json().replace("\"criterion\"", "\"burst\": \"measured\", \"criterion\"")).unwrap();
        assert_eq!(spec.burst, BurstModel::Measured);
        let measured = merge(&spec, &results);
        assert_eq!(random[0].a_to_b.burst_r, 1.0);
        assert_eq!(measured[0].a_to_b.burst_r, 4.0);
        assert!(measured[0].a_to_b.mos < random[0].a_to_b.mos);
    }

    #[test]
    fn merge_notes_missing_reports() {
        let spec: Spec = serde_json::from_str(spec_json()).unwrap();
        let calls = merge(&spec, &[report("A", 0, Direction::AToB, Some(10), None)]);
        let c = &calls[0];
        assert!(!c.supported);
        assert_eq!(c.a_to_b.received, 0);
        assert!(c.notes.iter().any(|n| n.contains("no receiver report from node D")), "{:?}", c.notes);
        assert!(c.notes.iter().any(|n| n.contains("no sender report from node D")), "{:?}", c.notes);
    }

    #[test]
    fn merge_accepts_a_silent_direction_but_not_a_missing_one() {
        let spec: Spec = serde_json::from_str(spec_json()).unwrap();
        let rx = |n: u64| ReceiveSummary { received: n, ..Default::default() };
        // D sent nothing (silent) and A received nothing: nothing to judge.
        let silent = merge(&spec, &[report("A", 0, Direction::BToA, None, Some(rx(0))), report("D", 0, Direction::BToA, Some(0), None)]);
        assert!(silent[0].b_to_a.supported, "{:?}", silent[0]);
        assert!(silent[0].notes.iter().any(|n| n.contains("silent")), "{:?}", silent[0].notes);
        // No sender report at all is not silence.
        let missing = merge(&spec, &[report("A", 0, Direction::BToA, None, Some(rx(0)))]);
        assert!(!missing[0].b_to_a.supported);
    }

    #[test]
    fn vad_schedule_has_spurts_of_the_right_mean_and_markers() {
        let vad = VadModel { on: true, talk_mean_us: 1e6, silence_mean_us: 1.5e6 };
        let mut s = TxStream {
            call: 0,
            dir: Direction::AToB,
            socket: 0,
            peer: "127.0.0.1:9".parse().unwrap(),
            ssrc: 1,
            seq: 0,
            ts0: 0,
            offset_us: 7_000,
            next_k: 0,
            rng: SmallRng::seed_from_u64(42),
            talking: true,
            state_end_us: 1_000_000,
            marker_next: true,
            sent: 0,
            send_errors: 0,
            max_lag_us: 0,
            late_sends: 0,
        };
        let duration = 2_000_000_000u64; // 2000 s of schedule, no sockets
        let (mut packets, mut spurts, mut last) = (0u64, 0u64, None);
        while let Some(t) = s.next_due(20_000, duration, &vad) {
            assert_eq!((t - 7_000) % 20_000, 0, "packets stay on the grid");
            if let Some(l) = last {
                assert!(t > l);
            }
            last = Some(t);
            if std::mem::take(&mut s.marker_next) {
                spurts += 1;
            }
            packets += 1;
            s.next_k += 1;
        }
        let activity = packets as f64 / 100_000.0; // grid has 100k slots
        assert!((activity - 0.4).abs() < 0.05, "activity {activity}");
        let mean_spurt_s = packets as f64 * 0.02 / spurts as f64;
        assert!((mean_spurt_s - 1.0).abs() < 0.15, "mean spurt {mean_spurt_s}");
    }

    #[test]
    fn cbr_schedule_is_every_interval_with_one_marker() {
        let vad = VadModel { on: false, talk_mean_us: 1e6, silence_mean_us: 1.5e6 };
        let mut s = TxStream {
            call: 0,
            dir: Direction::AToB,
            socket: 0,
            peer: "127.0.0.1:9".parse().unwrap(),
            ssrc: 1,
            seq: 0,
            ts0: 0,
            offset_us: 3,
            next_k: 0,
            rng: SmallRng::seed_from_u64(1),
            talking: true,
            state_end_us: u64::MAX,
            marker_next: true,
            sent: 0,
            send_errors: 0,
            max_lag_us: 0,
            late_sends: 0,
        };
        let mut n = 0;
        let mut markers = 0;
        while let Some(t) = s.next_due(20_000, 1_000_000, &vad) {
            assert_eq!(t, 3 + 20_000 * n);
            markers += u32::from(std::mem::take(&mut s.marker_next));
            n += 1;
            s.next_k += 1;
        }
        assert_eq!((n, markers), (50, 1));
    }

    #[test]
    fn ssrcs_differ_per_direction_and_call() {
        let mut seen = std::collections::HashSet::new();
        for call in 0..500 {
            for dir in [Direction::AToB, Direction::BToA] {
                assert!(seen.insert(ssrc_of(7, call, dir)));
            }
        }
    }
}
