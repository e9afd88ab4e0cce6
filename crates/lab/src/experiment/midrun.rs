//! Points whose number of active calls changes while they run (`airpack lab
//! point --calls N --calls-at T:N ...`; issue 12 point 8: the pacer's steady
//! rate after calls join and leave).
//!
//! Owns: the schedule ([`Schedule`]: its parsing and the call *sessions* it
//! implies), the `airpack voip` specs of the sessions (one spec per distinct
//! active interval, each started at its own time), their merge into one
//! result per session, the gateway daemon's rate sampled with timestamps
//! while the calls run ([`RateSampler`]), and the point's `mid_run` record
//! with the settle times ([`super::settle`]).
//!
//! A call `k` (0-based) is active while the schedule's current number of
//! calls is above `k`: calls leave from the highest number down and join
//! from the lowest up. Each contiguous active interval of a call is one
//! session with its own id and RTP port (16000 + 2 id), judged over its own
//! time only (the lab's MOS criterion, as every call); a call that leaves
//! and joins again is two sessions.
//!
//! Must not touch: the point's other steps (daemons, air, TCP flows: the
//! flow in [`super::run_point_with`]), voice-quality math (`airpack voip`'s
//! merge), the controller (the daemon's).

use super::settle::{self, Settle};
use super::{call_pair, ExperimentConfig};
use crate::topology::Mesh;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most changes in one schedule.
pub const MAX_CHANGES: usize = 32;
/// Most calls at any time of a schedule.
pub const MAX_SCHEDULE_CALLS: u32 = 1000;
/// Highest RTP port a session may use (the lab's voice rules: 16000-32000).
const MAX_PORT: u32 = 32000;
/// How often the gateway's rate is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// The number of active calls over a point: `(time s after the calls'
/// start, calls from then on)`, the first entry at 0 s, times increasing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// The changes, the first at 0.
    pub changes: Vec<(f64, u32)>,
    /// The point's length (s).
    pub duration_s: f64,
}

/// One call's contiguous active interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Session {
    /// Unique id (the `airpack voip` call id; RTP port 16000 + 2 id).
    pub id: u32,
    /// The call (0-based; its endpoints are the topology's call pair `call`).
    pub call: u32,
    /// Start, s after the calls' start.
    pub start_s: f64,
    /// End (s).
    pub end_s: f64,
}

impl Schedule {
    /// `initial` calls from 0 s, then each `T:N` of `at` (`--calls-at`): `N`
    /// calls from `T` s on. Times strictly increasing inside `(0,
    /// duration_s)`, each `N` different from the one before.
    pub fn parse(initial: u32, at: &[String], duration_s: f64) -> Result<Schedule> {
        if at.len() > MAX_CHANGES {
            bail!("at most {MAX_CHANGES} --calls-at changes");
        }
        let mut changes = vec![(0.0, initial)];
        for a in at {
            let (t, n) = a
                .split_once(':')
                .with_context(|| format!("--calls-at {a:?}: use SECONDS:CALLS, e.g. 30:8"))?;
            let t: f64 = t
                .trim()
                .parse()
                .ok()
                .filter(|t: &f64| t.is_finite())
                .with_context(|| format!("--calls-at {a:?}: {t:?} is not a number of seconds"))?;
            let n: u32 = n
                .trim()
                .parse()
                .with_context(|| format!("--calls-at {a:?}: {n:?} is not a number of calls"))?;
            let &(t0, n0) = changes.last().expect("the initial entry");
            if !(t > t0 && t < duration_s) {
                bail!("--calls-at {a:?}: the time must be after {t0} s and before the point's end ({duration_s} s)");
            }
            if n == n0 {
                bail!("--calls-at {a:?}: already {n0} calls (no change)");
            }
            changes.push((t, n));
        }
        if let Some(&(_, n)) = changes.iter().find(|c| c.1 > MAX_SCHEDULE_CALLS) {
            bail!("{n} calls: at most {MAX_SCHEDULE_CALLS} in a schedule");
        }
        let s = Schedule {
            changes,
            duration_s,
        };
        let last = s.sessions().len() as u32;
        if 16000 + 2 * last + 1 > MAX_PORT {
            bail!("{last} call sessions: more than the lab's voice ports (16000-{MAX_PORT}) hold");
        }
        Ok(s)
    }

    /// Most calls active at once.
    pub fn max_calls(&self) -> u32 {
        self.changes.iter().map(|c| c.1).max().unwrap_or(0)
    }

    /// Every call's sessions, by call, then time.
    pub fn sessions(&self) -> Vec<Session> {
        let mut v = Vec::new();
        for call in 0..self.max_calls() {
            let mut start = None;
            for (i, &(t, n)) in self.changes.iter().enumerate() {
                let end = self.changes.get(i + 1).map_or(self.duration_s, |c| c.0);
                match (call < n, start) {
                    (true, None) => start = Some(t),
                    (false, Some(s)) => {
                        v.push((call, s, t));
                        start = None;
                    }
                    _ => {}
                }
                if i + 1 == self.changes.len() {
                    if let Some(s) = start {
                        v.push((call, s, end));
                    }
                }
            }
        }
        v.into_iter()
            .enumerate()
            .map(|(id, (call, start_s, end_s))| Session {
                id: id as u32,
                call,
                start_s,
                end_s,
            })
            .collect()
    }
}

/// Sessions grouped by their interval (one `airpack voip` spec each), in
/// order of start, then end.
pub fn groups(sessions: &[Session]) -> Vec<Vec<Session>> {
    let mut keys: Vec<(f64, f64)> = sessions.iter().map(|s| (s.start_s, s.end_s)).collect();
    keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    keys.dedup();
    keys.iter()
        .map(|&(a, b)| {
            sessions
                .iter()
                .filter(|s| s.start_s == a && s.end_s == b)
                .cloned()
                .collect()
        })
        .collect()
}

/// The `airpack voip` spec of one group of sessions (same interval).
pub fn group_spec(
    cfg: &ExperimentConfig,
    mesh_addr: &dyn Fn(&str) -> String,
    group: &[Session],
    start_at_unix_ms: u64,
) -> Value {
    let s0 = &group[0];
    let calls: Vec<Value> = group
        .iter()
        .map(|s| {
            let (a, b) = call_pair(&cfg.topo, s.call);
            let port = 16000 + 2 * s.id;
            json!({"id": s.id,
                   "a": {"node": a, "addr": mesh_addr(a), "port": port},
                   "b": {"node": b, "addr": mesh_addr(b), "port": port}})
        })
        .collect();
    json!({
        "codec": cfg.codec, "interval_ms": cfg.interval_ms, "vad": cfg.vad, "seed": cfg.seed,
        "duration_s": s0.end_s - s0.start_s,
        "start_at_unix_ms": start_at_unix_ms + (s0.start_s * 1000.0).round() as u64,
        "playout_ms": cfg.playout_ms, "criterion": cfg.criterion, "calls": calls
    })
}

/// One reading of the gateway daemon.
#[derive(Debug, Clone, Serialize)]
pub struct RateSample {
    /// Seconds after the calls' start (wall clock of the lab, read when the
    /// daemon answered).
    pub t_s: f64,
    /// `gateway.tcp_rate_bps`.
    pub rate_bps: f64,
    /// `gateway.network_mos`.
    pub network_mos: Option<f64>,
    /// `gateway.calls_with_mos`.
    pub calls_with_mos: Option<u64>,
    /// `gateway.last_band`.
    pub band: Option<String>,
}

/// Samples the gateway daemon's `airpack stats --json` every
/// [`SAMPLE_EVERY`] on a thread until finished.
pub struct RateSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    samples: Arc<Mutex<Vec<RateSample>>>,
}

impl RateSampler {
    /// Start sampling the daemon on `socket` in namespace `ns`; times are
    /// relative to `start_at_unix_ms`.
    pub fn start(bin: &Path, ns: &str, socket: &Path, start_at_unix_ms: u64) -> RateSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s2, out) = (stop.clone(), samples.clone());
        let (bin, ns, socket) = (bin.to_path_buf(), ns.to_string(), socket.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                let next = std::time::Instant::now() + SAMPLE_EVERY;
                if let Ok(v) = stats(&bin, &ns, &socket) {
                    let t_s = (super::unix_ms() as f64 - start_at_unix_ms as f64) / 1000.0;
                    if let Some(s) = reading(&v, t_s) {
                        out.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                    }
                }
                while !s2.load(Ordering::Relaxed) && std::time::Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        RateSampler {
            stop,
            thread: Some(thread),
            samples,
        }
    }

    /// Stop and return the samples in time order.
    pub fn finish(mut self) -> Vec<RateSample> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for RateSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn stats(bin: &Path, ns: &str, socket: &Path) -> Result<Value> {
    let out = crate::netns::run(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            &bin.to_string_lossy(),
            "stats",
            "--socket",
            &socket.to_string_lossy(),
            "--json",
        ],
    )?;
    serde_json::from_str(&out).context("airpack stats --json output")
}

/// The sample of one `airpack stats --json` answer (None without a gateway).
fn reading(st: &Value, t_s: f64) -> Option<RateSample> {
    let g = st.get("gateway")?;
    Some(RateSample {
        t_s,
        rate_bps: g.get("tcp_rate_bps")?.as_f64()?,
        network_mos: g.get("network_mos").and_then(Value::as_f64),
        calls_with_mos: g.get("calls_with_mos").and_then(Value::as_u64),
        band: g
            .get("last_band")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// Per session: supported, lowest MOS and worst loss of its two directions,
/// from the merged results (`call` = session id).
fn session_results(sessions: &[Session], merged: &[crate::voip::CallResult]) -> Vec<Value> {
    sessions
        .iter()
        .map(|s| {
            let r = merged.iter().find(|c| c.call == s.id);
            let q = r.map(|c| serde_json::to_value(c).unwrap_or(Value::Null));
            let dir = |d: &str, k: &str| {
                q.as_ref()
                    .and_then(|q| q.get(d)?.get(k)?.as_f64())
                    .unwrap_or(f64::NAN)
            };
            json!({
                "id": s.id, "call": s.call, "start_s": s.start_s, "end_s": s.end_s,
                "supported": r.is_some_and(|c| c.supported),
                "mos_min": dir("a_to_b", "mos").min(dir("b_to_a", "mos")),
                "loss_max_pct": dir("a_to_b", "loss_pct").max(dir("b_to_a", "loss_pct")),
            })
        })
        .collect()
}

/// The point's `mid_run` record: the schedule, each session's result, the
/// rate samples and the settle time of each phase.
pub fn record(
    sched: &Schedule,
    sessions: &[Session],
    merged: &[crate::voip::CallResult],
    samples: &[RateSample],
) -> (Value, Vec<Settle>) {
    let rates: Vec<(f64, f64)> = samples.iter().map(|s| (s.t_s, s.rate_bps)).collect();
    let settles = if samples.is_empty() {
        Vec::new()
    } else {
        settle::settle_all(&rates, &sched.changes, sched.duration_s)
    };
    let per = session_results(sessions, merged);
    let ok = per.iter().filter(|v| v["supported"] == true).count();
    // a call is supported when every one of its sessions is
    let calls_ok = (0..sched.max_calls())
        .filter(|&c| {
            per.iter()
                .filter(|v| v["call"] == c)
                .all(|v| v["supported"] == true)
        })
        .count();
    let v = json!({
        "schedule": sched.changes,
        "duration_s": sched.duration_s,
        "sessions": per,
        "sessions_supported": ok,
        "calls": sched.max_calls(),
        "calls_supported_in_every_session": calls_ok,
        "settle_definition": {
            "steady": "median rate over the phase's last half",
            "band": settle::BAND,
            "reached": "first sample from which every later sample of the phase is within the band",
            "target_s": settle::TARGET_S,
            "sample_every_ms": SAMPLE_EVERY.as_millis() as u64,
        },
        "settle": settles,
        "rate_samples": samples,
    });
    (v, settles)
}

/// One progress line per phase.
pub fn settle_lines(settles: &[Settle]) -> String {
    settles
        .iter()
        .map(|s| {
            let k = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}", v / 1000.0));
            format!(
                "lab: {} -> {} calls at {:.0} s: rate before {} kbit/s, steady {} kbit/s, settled after {} (target {} s: {})\n",
                s.from_calls,
                s.to_calls,
                s.at_s,
                k(s.rate_before_bps),
                k(s.steady_bps),
                s.settle_s.map_or("never".into(), |t| format!("{t:.1} s")),
                settle::TARGET_S,
                if s.met { "met" } else { "NOT met" }
            )
        })
        .collect()
}

/// Runs every session's `airpack voip` (one process per group and endpoint
/// node, all started now and each waiting for its group's start) and
/// returns the node results and the merged per-session results.
pub fn run_sessions(
    cfg: &ExperimentConfig,
    mesh: &mut Mesh,
    dir: &Path,
    sched: &Schedule,
    start_at_unix_ms: u64,
) -> Result<(Vec<crate::voip::NodeResult>, Vec<crate::voip::CallResult>)> {
    let sessions = sched.sessions();
    let addr_of = |x: &str| mesh.node(x).map(|m| m.addr.to_string()).unwrap_or_default();
    let mut specs: Vec<(PathBuf, crate::voip::Spec, Vec<String>)> = Vec::new();
    for (i, g) in groups(&sessions).iter().enumerate() {
        let spec = group_spec(cfg, &addr_of, g, start_at_unix_ms);
        let path = dir.join(format!("calls-{i}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&spec)?)?;
        let mut nodes: Vec<String> = Vec::new();
        for s in g {
            let (a, b) = call_pair(&cfg.topo, s.call);
            for x in [a, b] {
                if !nodes.iter().any(|y| y == x) {
                    nodes.push(x.to_string());
                }
            }
        }
        let t: crate::voip::Spec = serde_json::from_value(spec).context("voip spec type")?;
        specs.push((path, t, nodes));
    }
    let mut voips = Vec::new();
    let mut owner = Vec::new();
    for (i, (path, _, nodes)) in specs.iter().enumerate() {
        let v = super::spawn_voips(cfg, mesh, dir, path, nodes, &format!(".{i}"))?;
        owner.extend(std::iter::repeat(i).take(v.len()));
        voips.extend(v);
    }
    let results = super::wait_voips(cfg, mesh, &mut voips)?;
    let mut merged = Vec::new();
    for (i, (_, spec, _)) in specs.iter().enumerate() {
        let mine: Vec<crate::voip::NodeResult> = results
            .iter()
            .zip(&owner)
            .filter(|(_, &o)| o == i)
            .map(|(r, _)| r.clone())
            .collect();
        merged.extend(crate::voip::merge(spec, &mine));
    }
    Ok((results, merged))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_a_schedule_and_refuses_bad_changes() {
        let s = Schedule::parse(16, &at(&["30:8", "60:16"]), 90.0).unwrap();
        assert_eq!(s.changes, [(0.0, 16), (30.0, 8), (60.0, 16)]);
        assert_eq!(s.max_calls(), 16);
        let s = Schedule::parse(7, &at(&[" 29.5 : 3 "]), 90.0).unwrap();
        assert_eq!(s.changes, [(0.0, 7), (29.5, 3)]);
        for bad in [
            &["30"][..],
            &["x:8"],
            &["30:-1"],
            &["30:eight"],
            &["0:8"],
            &["90:8"],
            &["95:8"],
            &["30:8", "30:16"],
            &["60:8", "30:16"],
            &["30:16"],
            &["30:8", "60:8"],
            &["nan:8"],
            &["30:100000"],
        ] {
            assert!(Schedule::parse(16, &at(bad), 90.0).is_err(), "{bad:?}");
        }
        assert!(Schedule::parse(1, &at(&vec!["1:2"; 33]), 90.0).is_err());
        // 5 x 1000 sessions fit the voice ports (up to 26 001), 9 x 1000 do not
        let flip = |k: usize| -> Vec<String> {
            (1..=k)
                .map(|i| format!("{i}:{}", if i % 2 == 1 { 0 } else { 1000 }))
                .collect()
        };
        assert_eq!(
            Schedule::parse(1000, &flip(8), 20.0)
                .unwrap()
                .sessions()
                .len(),
            5000
        );
        assert!(Schedule::parse(1000, &flip(16), 20.0).is_err());
    }

    #[test]
    fn calls_leave_from_the_top_and_rejoin_as_new_sessions() {
        let s = Schedule::parse(4, &at(&["30:2", "60:4"]), 90.0).unwrap();
        let v = s.sessions();
        let spans: Vec<(u32, u32, f64, f64)> = v
            .iter()
            .map(|s| (s.id, s.call, s.start_s, s.end_s))
            .collect();
        assert_eq!(
            spans,
            [
                (0, 0, 0.0, 90.0),
                (1, 1, 0.0, 90.0),
                (2, 2, 0.0, 30.0),
                (3, 2, 60.0, 90.0),
                (4, 3, 0.0, 30.0),
                (5, 3, 60.0, 90.0),
            ]
        );
        let g = groups(&v);
        let ids: Vec<Vec<u32>> = g.iter().map(|g| g.iter().map(|s| s.id).collect()).collect();
        assert_eq!(ids, [vec![2, 4], vec![0, 1], vec![3, 5]]);
        // joining: 3 -> 7 from 30 s, then 7 -> 0 at 80 s
        let s = Schedule::parse(3, &at(&["30:7", "80:0"]), 90.0).unwrap();
        let v = s.sessions();
        assert_eq!(v.len(), 7);
        assert!(v[..3].iter().all(|s| (s.start_s, s.end_s) == (0.0, 80.0)));
        assert!(v[3..].iter().all(|s| (s.start_s, s.end_s) == (30.0, 80.0)));
        // at every time the active sessions equal the schedule's count
        let s = Schedule::parse(5, &at(&["10:2", "20:9", "40:1", "50:5"]), 60.0).unwrap();
        let v = s.sessions();
        for (i, &(t, n)) in s.changes.iter().enumerate() {
            let mid = (t + s.changes.get(i + 1).map_or(60.0, |c| c.0)) / 2.0;
            let active: Vec<u32> = v
                .iter()
                .filter(|x| x.start_s <= mid && mid < x.end_s)
                .map(|x| x.call)
                .collect();
            assert_eq!(active, (0..n).collect::<Vec<_>>(), "at {mid} s");
        }
    }

    #[test]
    fn a_group_spec_starts_at_its_own_time_with_its_own_ports() {
        let c = super::super::tests::cfg();
        // call 1 joins at 3 s
        let s = Schedule::parse(1, &at(&["3:2"]), 5.0).unwrap();
        let g = groups(&s.sessions());
        assert_eq!(g.len(), 2);
        let spec = group_spec(&c, &|n: &str| format!("addr-{n}"), &g[0], 1000);
        assert_eq!(spec["start_at_unix_ms"], 1000);
        assert_eq!(spec["duration_s"], 5.0);
        assert_eq!(spec["calls"][0]["id"], 0);
        let spec = group_spec(&c, &|n: &str| format!("addr-{n}"), &g[1], 1000);
        assert_eq!(spec["start_at_unix_ms"], 4000);
        assert_eq!(spec["duration_s"], 2.0);
        assert_eq!(spec["calls"][0]["id"], 1);
        assert_eq!(spec["calls"][0]["a"]["port"], 16002);
        assert_eq!(spec["calls"][0]["a"]["node"], "B", "call 1's pair");
        let spec = group_spec(&c, &|_: &str| "10.0.0.1".to_string(), &g[1], 1000);
        let t: crate::voip::Spec = serde_json::from_value(spec).unwrap();
        t.validate().unwrap();
    }

    #[test]
    fn a_reading_needs_the_gateway_object() {
        let v = json!({"gateway": {"tcp_rate_bps": 288000, "network_mos": 3.7,
                       "calls_with_mos": 16, "last_band": "fair"}});
        let r = reading(&v, 1.5).unwrap();
        assert_eq!(
            (r.t_s, r.rate_bps, r.network_mos),
            (1.5, 288_000.0, Some(3.7))
        );
        assert_eq!(r.band.as_deref(), Some("fair"));
        assert!(reading(&json!({"total": {}}), 0.0).is_none());
    }
}
