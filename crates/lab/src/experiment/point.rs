//! One measured point: its record ([`Point`]), its summary from the merged
//! call results and the daemons' counters, whether it must be measured again,
//! and its progress line.
//!
//! Must not touch: processes, namespaces or the air (the flow in
//! [`super::run_point_with`] measures; this only reads what it collected),
//! voice-quality math (`airpack-voice` judges each direction), the search.

use super::Setup;
use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Instant;

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Setup name.
    pub setup: Setup,
    /// Number of simultaneous calls.
    pub calls: u32,
    /// All calls supported (both directions).
    pub supported: bool,
    /// Calls supported.
    pub supported_calls: u32,
    /// Mean MOS over call directions.
    pub mos: f64,
    /// Lowest MOS of any call direction.
    pub mos_min: f64,
    /// Mean loss over call directions (%).
    pub loss: f64,
    /// Worst loss of any call direction (%).
    pub loss_max: f64,
    /// Mean late loss behind the playout buffer (%).
    pub late: f64,
    /// Mean one-way network delay (ms), mean over call directions.
    pub delay_ms: f64,
    /// Median one-way delay (ms): the mean over call directions of each
    /// direction's median (`delay_p50_ms`), or of its mean if absent.
    pub delay_median_ms: f64,
    /// Worst p95 delay of any call direction (ms).
    pub delay_p95_ms: f64,
    /// RFC 3550 jitter at the end of each call (ms), mean over call directions.
    pub jitter_ms: f64,
    /// Each direction's mean jitter over its call (ms), mean over call directions.
    pub jitter_mean_ms: f64,
    /// Highest jitter any call direction reached (ms).
    pub jitter_max_ms: f64,
    /// Network-wide aggregation ratio: (aggregated + unaggregated packets) /
    /// (bundles + unaggregated packets) over all daemons; 1 when off.
    pub aggregation_ratio: f64,
    /// Frames sent on the emulated air (all nodes).
    pub frames_on_air: u64,
    /// Frames dropped by the nodes' MAC queues.
    pub mac_queue_drops: u64,
    /// Frames sent on the air, per node.
    pub frames_per_node: BTreeMap<String, u64>,
    /// MAC queue drops, per node.
    pub drops_per_node: BTreeMap<String, u64>,
    /// Per-call results as merged by `airpack_lab::voip::merge`.
    pub call_results: Value,
    /// Per-node daemon totals (`airpack stats --json` `total`).
    pub daemon_totals: BTreeMap<String, Value>,
    /// Seconds the point took, wall clock.
    pub wall_s: f64,
    /// Largest lateness of any RTP send behind its schedule (ms): a point
    /// whose senders were starved of CPU is not a measurement of the air.
    pub max_send_lag_ms: f64,
    /// With real phones (`Client::Baresip`): per call, the SIP setup time
    /// and the phones' own RTCP summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signalling: Option<Value>,
    /// `link-adaptive`: per directed link `"A->B"`, the `max_size` A's
    /// engine used toward B, sampled every second of the calls
    /// ([`crate::link_size::Sampler`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub link_sizes: BTreeMap<String, Value>,
    /// Links with a bit error rate (ns-3 air): frames received and lost to
    /// it per directed link `"A->B"` during the calls.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ber_frames: BTreeMap<String, Value>,
    /// Downlink-multiplexing setups: each daemon's `ap` / `station` object
    /// of `airpack stats --json`, keyed `NODE.ap` / `NODE.station`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub downlink: BTreeMap<String, Value>,
    /// Packets lost inside the multiplexer and demultiplexers (the sum of
    /// their `drops` other than refused registrations; frames lost on the
    /// air are the stations' `lost_frames`, not counted here).
    pub downlink_drops: u64,
    /// The ns-3 air's real-time discipline during the point (None on the tc
    /// air): a point whose air lagged more than
    /// [`crate::air_ns3::MAX_LAG_P99_MS`] p99 is re-measured.
    pub air: Option<crate::air_ns3::AirStats>,
    /// Gateway presets with TCP flows: each flow's goodput, throughput and
    /// RTT, and their totals ([`crate::tcp_bulk`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<crate::tcp_bulk::TcpSummary>,
    /// `pacer`: the gateway daemon's `gateway` object of `airpack stats
    /// --json` at the end of the point (network MOS, rate, history).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Value>,
    /// Calls joining and leaving (`--calls-at`): the schedule, each call
    /// session's result, the gateway's rate sampled over the point and the
    /// settle time after each change ([`super::midrun::record`]). `calls`
    /// and `supported_calls` then count call sessions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mid_run: Option<Value>,
}

/// A point whose senders lagged more than this (ms) is re-measured.
pub const MAX_SEND_LAG_MS: f64 = 50.0;

/// Every JSON object under `v` that has all `keys` (the per-direction results).
fn objects_with<'a>(
    v: &'a Value,
    keys: &[&str],
    out: &mut Vec<&'a serde_json::Map<String, Value>>,
) {
    match v {
        Value::Object(m) => {
            if keys.iter().all(|k| m.contains_key(*k)) {
                out.push(m);
            } else {
                for x in m.values() {
                    objects_with(x, keys, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| objects_with(x, keys, out)),
        _ => {}
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// Why a measured point is not a measurement of the air and is measured
/// again: its senders lagged, its air lagged, or its air aborted on the
/// real-time hard limit (a stalled machine).
pub(crate) fn remeasure_reason(r: &Result<Point>) -> Option<String> {
    match r {
        Ok(p) if p.max_send_lag_ms > MAX_SEND_LAG_MS => Some(format!(
            "senders lagged {:.0} ms behind schedule",
            p.max_send_lag_ms
        )),
        Ok(Point { air: Some(a), .. }) if !a.kept_up() => Some(format!(
            "the ns-3 air lagged {:.2} ms p99 (> {} ms; max {:.1} ms)",
            a.lag_p99_ms,
            crate::air_ns3::MAX_LAG_P99_MS,
            a.lag_max_ms
        )),
        Err(e) if format!("{e:#}").contains(crate::air_ns3::HARD_LIMIT_ABORT) => {
            Some("the ns-3 air aborted on its real-time hard limit".into())
        }
        Err(e) if format!("{e:#}").contains(crate::air_ns3::IGNORED_SIGTERM) => {
            Some("the ns-3 air did not stop after SIGTERM".into())
        }
        _ => None,
    }
}

/// A point from merged call results alone (no daemons, no air counters):
/// the pure simulation's points ([`crate::validate_sim`]).
pub(crate) fn summarize_point(setup: Setup, n: u32, call_results: Value, t0: Instant) -> Point {
    summarize(setup, n, call_results, 1.0, 0, 0, BTreeMap::new(), t0)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn summarize(
    setup: Setup,
    n: u32,
    call_results: Value,
    aggregation_ratio: f64,
    frames_on_air: u64,
    mac_queue_drops: u64,
    daemon_totals: BTreeMap<String, Value>,
    t0: Instant,
) -> Point {
    let mut dirs = Vec::new();
    objects_with(&call_results, &["mos", "loss_pct", "delay_ms"], &mut dirs);
    dirs.retain(|m| m.get("sent").and_then(Value::as_u64) != Some(0));
    // directions without a value (e.g. no delay when nothing arrived) are skipped
    let col = |k: &str| {
        dirs.iter()
            .filter_map(|m| m.get(k).and_then(Value::as_f64))
            .collect::<Vec<f64>>()
    };
    let calls = call_results.as_array().cloned().unwrap_or_default();
    // A call is supported when each direction is supported or sent nothing
    // at all (voice activity can keep a direction silent for a whole short
    // run; there is no speech to judge, so it cannot fail the call).
    let dir_ok = |d: Option<&Value>| match d {
        Some(q) => {
            q.get("supported").and_then(Value::as_bool) == Some(true)
                || q.get("sent").and_then(Value::as_u64) == Some(0)
        }
        None => false,
    };
    let supported_calls = calls
        .iter()
        .filter(|c| {
            c.get("supported").and_then(Value::as_bool) == Some(true)
                || (dir_ok(c.get("a_to_b")) && dir_ok(c.get("b_to_a")))
        })
        .count() as u32;
    let all = supported_calls == n && calls.len() == n as usize && n > 0;
    Point {
        setup,
        calls: n,
        supported: all,
        supported_calls,
        mos: mean(&col("mos")),
        mos_min: col("mos")
            .into_iter()
            .fold(f64::INFINITY, f64::min)
            .min(5.0),
        loss: mean(&col("loss_pct")),
        loss_max: col("loss_pct").into_iter().fold(0.0, f64::max),
        late: mean(&col("late_pct")),
        delay_ms: mean(&col("delay_ms")),
        delay_median_ms: {
            let p50 = col("delay_p50_ms");
            if p50.is_empty() {
                median(&col("delay_ms"))
            } else {
                mean(&p50)
            }
        },
        delay_p95_ms: col("delay_p95_ms").into_iter().fold(0.0, f64::max),
        jitter_ms: mean(&col("jitter_ms")),
        jitter_mean_ms: mean(&col("jitter_mean_ms")),
        jitter_max_ms: col("jitter_max_ms").into_iter().fold(0.0, f64::max),
        aggregation_ratio,
        frames_on_air,
        mac_queue_drops,
        frames_per_node: BTreeMap::new(),
        drops_per_node: BTreeMap::new(),
        call_results,
        daemon_totals,
        wall_s: t0.elapsed().as_secs_f64(),
        max_send_lag_ms: 0.0,
        signalling: None,
        downlink: BTreeMap::new(),
        downlink_drops: 0,
        air: None,
        link_sizes: BTreeMap::new(),
        ber_frames: BTreeMap::new(),
        tcp: None,
        gateway: None,
        mid_run: None,
    }
}

/// Packets the multiplexer or a demultiplexer dropped: the AP's
/// `queue_full`, `frame_send_failed`, `unicast_send_failed` and the
/// stations' drops of frames or entries (`wrong_epoch`, `no_context`,
/// `bad_entry`, `tun_write_failed`); registration refusals, frames from
/// other sources and the AP's further frame copies (`frame_copies`) are
/// not packets of a call lost. Reads the daemon's
/// stats layout (`drops.frames.*`, `drops.packets.*`) and the flat one of
/// earlier daemons (`drops.no_context`, ...).
pub fn downlink_drops(downlink: &BTreeMap<String, Value>) -> u64 {
    let mut n = 0;
    for (k, v) in downlink {
        let keys: &[&str] = if k.ends_with(".ap") {
            &["queue_full", "frame_send_failed", "unicast_send_failed"]
        } else {
            &[
                "wrong_epoch",
                "no_context",
                "bad_entry",
                "tun_write_errors",
                "frames/wrong_epoch",
                "packets/no_context",
                "packets/bad_entry",
                "packets/tun_write_failed",
            ]
        };
        for key in keys {
            n += v
                .pointer(&format!("/drops/{key}"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
        }
    }
    n
}

/// One line of progress for a point.
pub fn point_line(p: &Point) -> String {
    format!(
        "[{:>15}] {:>3} calls: {} ({}/{} ok)  MOS {:.2} (min {:.2})  loss {:.2} % (max {:.2})  delay {:.1} ms  jitter {:.1} ms (max {:.1})  agg {:.2}  frames {}  ({:.0} s, send lag {:.1} ms{})",
        p.setup.name(),
        p.calls,
        if p.supported { "supported  " } else { "UNSUPPORTED" },
        p.supported_calls,
        p.calls,
        p.mos,
        p.mos_min,
        p.loss,
        p.loss_max,
        p.delay_ms,
        p.jitter_mean_ms,
        p.jitter_max_ms,
        p.aggregation_ratio,
        p.frames_on_air,
        p.wall_s,
        p.max_send_lag_ms,
        p.air.map(|a| format!(", air lag p99 {:.2} ms", a.lag_p99_ms)).unwrap_or_default()
    ) + &p
        .tcp
        .as_ref()
        .map(|t| format!("  TCP {} flows {:.0} kbit/s goodput ({}), {:.0} kbit/s throughput, RTT mean/median/p95 {:.0}/{:.0}/{:.0} ms", t.flows, t.goodput_kbps, t.per_flow.iter().map(|f| format!("{:.0}", f.goodput_kbps)).collect::<Vec<_>>().join("/"), t.throughput_kbps, t.rtt_mean_ms, t.rtt_median_ms, t.rtt_p95_ms))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mux_drops_count_the_roles_packet_losses_only() {
        let mut d = BTreeMap::new();
        d.insert(
            "AP.ap".to_string(),
            json!({"drops": {"queue_full": 2, "registration_bad_tag": 9}}),
        );
        d.insert("S1.station".to_string(), json!({"drops": {"no_context": 3, "not_from_ap": 7, "bad_entry": 1}, "lost_frames": 40}));
        assert_eq!(downlink_drops(&d), 6);
        // the daemon's nested layout (drops.frames.*, drops.packets.*)
        let mut d = BTreeMap::new();
        d.insert("AP.ap".to_string(), json!({"drops": {"queue_full": 1, "frame_send_failed": 2, "unicast_send_failed": 4}, "registrations": {"rejected": {"bad_tag": 9}}}));
        d.insert(
            "S1.station".to_string(),
            json!({"drops": {"frames": {"not_from_ap": 7, "stale": 8, "wrong_epoch": 16, "refused_truncated": 5}, "packets": {"no_context": 32, "bad_entry": 64, "tun_write_failed": 128}}, "lost_frames": 40, "duplicates": 3, "frame_copies": 256}),
        );
        // frame copies are not losses (nor the earlier daemons' `stale`,
        // which were copies too)
        assert_eq!(downlink_drops(&d), 247);
    }

    #[test]
    fn summary_reads_direction_objects() {
        let calls = json!([
            {"call": 0, "supported": true,
             "a_to_b": {"mos": 4.0, "loss_pct": 1.0, "delay_ms": 10.0, "delay_p95_ms": 20.0, "jitter_ms": 1.0, "jitter_mean_ms": 2.0, "jitter_max_ms": 9.0, "late_pct": 0.0},
             "b_to_a": {"mos": 3.0, "loss_pct": 3.0, "delay_ms": 30.0, "delay_p95_ms": 50.0, "jitter_ms": 3.0, "jitter_mean_ms": 4.0, "jitter_max_ms": 7.0, "late_pct": 2.0}},
            {"call": 1, "supported": false,
             "a_to_b": {"mos": 2.0, "loss_pct": 5.0, "delay_ms": 20.0, "delay_p95_ms": 40.0, "jitter_ms": 2.0, "late_pct": 1.0},
             "b_to_a": {"mos": 3.0, "loss_pct": 3.0, "delay_ms": 40.0, "delay_p95_ms": 45.0, "jitter_ms": 2.0, "late_pct": 1.0}}
        ]);
        let p = summarize(
            Setup::Off,
            2,
            calls,
            1.0,
            10,
            0,
            BTreeMap::new(),
            Instant::now(),
        );
        assert!(!p.supported);
        // a silent direction (nothing sent) neither fails a call nor enters the means
        let silent = json!([{"call": 0, "supported": false,
            "a_to_b": {"sent": 10, "supported": true, "mos": 4.0, "loss_pct": 0.0, "delay_ms": 10.0},
            "b_to_a": {"sent": 0, "supported": false, "mos": 1.0, "loss_pct": 100.0, "delay_ms": null}}]);
        let q = summarize(
            Setup::Off,
            1,
            silent,
            1.0,
            10,
            0,
            BTreeMap::new(),
            Instant::now(),
        );
        assert!(q.supported);
        assert_eq!(q.mos, 4.0);
        let lost = json!([{"call": 0, "supported": false,
            "a_to_b": {"sent": 10, "supported": true, "mos": 4.0, "loss_pct": 0.0, "delay_ms": 10.0},
            "b_to_a": {"sent": 5, "supported": false, "mos": 1.0, "loss_pct": 100.0, "delay_ms": null}}]);
        assert!(
            !summarize(
                Setup::Off,
                1,
                lost,
                1.0,
                10,
                0,
                BTreeMap::new(),
                Instant::now()
            )
            .supported
        );
        assert_eq!(p.supported_calls, 1);
        assert_eq!(p.mos, 3.0);
        assert_eq!(p.mos_min, 2.0);
        assert_eq!(p.loss_max, 5.0);
        assert_eq!(p.delay_ms, 25.0);
        assert_eq!(p.delay_median_ms, 25.0);
        assert_eq!(p.delay_p95_ms, 50.0);
        assert_eq!(p.jitter_ms, 2.0);
        // Only two directions carry mean / max jitter: the mean is theirs, the max the largest.
        assert_eq!((p.jitter_mean_ms, p.jitter_max_ms), (3.0, 9.0));
    }

    #[test]
    fn lagging_air_or_hard_limit_abort_is_measured_again() {
        use crate::air_ns3::AirStats;
        let calls = json!([{"call": 0, "supported": true, "a_to_b": {"mos": 4.0, "loss_pct": 0.0, "delay_ms": 1.0}}]);
        let mut p = summarize(
            Setup::Off,
            1,
            calls,
            1.0,
            10,
            0,
            BTreeMap::new(),
            Instant::now(),
        );
        assert_eq!(
            remeasure_reason(&Ok(p.clone())),
            None,
            "tc air, senders on time"
        );
        let stats = |p99: f64| AirStats {
            lag_p50_ms: 0.05,
            lag_p99_ms: p99,
            lag_max_ms: 9.0,
            events_per_s: 5000.0,
            cpu_pct: 10.0,
        };
        p.air = Some(stats(0.4));
        assert_eq!(remeasure_reason(&Ok(p.clone())), None);
        p.air = Some(stats(1.5));
        assert!(remeasure_reason(&Ok(p.clone()))
            .unwrap()
            .contains("air lagged 1.50 ms p99"));
        p.air = Some(stats(0.4));
        p.max_send_lag_ms = MAX_SEND_LAG_MS + 1.0;
        assert!(remeasure_reason(&Ok(p)).unwrap().contains("senders lagged"));
        let abort = anyhow::anyhow!("the ns-3 air died during the point (signal: 6):\nmsg=\"RealtimeSimulatorImpl::ProcessOneEvent (): Hard real-time limit exceeded (jitter = 931313919)\"");
        assert!(remeasure_reason(&Err(abort)).is_some());
        let stuck =
            anyhow::anyhow!("the ns-3 air ignored SIGTERM for 20 s: ").context("stop the ns-3 air");
        assert!(remeasure_reason(&Err(stuck))
            .unwrap()
            .contains("did not stop"));
        assert_eq!(
            remeasure_reason(&Err(anyhow::anyhow!("voip on A failed"))),
            None
        );
        // the point's JSON carries the air's numbers
        let mut q = summarize(
            Setup::Off,
            1,
            json!([]),
            1.0,
            0,
            0,
            BTreeMap::new(),
            Instant::now(),
        );
        q.air = Some(stats(0.4));
        let v = serde_json::to_value(&q).unwrap();
        assert_eq!(v["air"]["lag_p99_ms"], 0.4);
        assert_eq!(v["air"]["events_per_s"], 5000.0);
    }
}
