//! The daemon's busy signal, combined from its sources (issue 11 point 6):
//! its own sockets' unsent bytes (SIOCOUTQ), the radios' root qdisc backlog
//! (`[medium] qdisc`, read off the loop by [`QdiscMonitor`]), a medium
//! counters file (`[medium] file`: utilisation and MAC queue, the lab's
//! stand-in for nl80211 survey and driver queue data) and, on real radios
//! without a file, the nl80211 survey's channel busy time (`[medium]
//! survey`, read off the loop by [`SurveyMonitor`]: utilisation only).
//!
//! Owns: the sources and their combination into `(busy, utilisation)` for
//! `Engine::set_medium`. Must not touch: the engine's policy (what a busy
//! link or a utilisation means is the engine's `LinkMode`), sockets or
//! timers of the loop.

use super::super::config::{LinkModeCfg, Plan, SurveyCfg};
use crate::linux::busy::{MediumFile, QdiscMonitor};
use crate::linux::survey::SurveyMonitor;
use serde_json::{json, Value};
use std::time::Duration;
use tracing::warn;

/// The busy-signal sources of a running daemon.
pub(super) struct BusySources {
    qdisc: Option<QdiscMonitor>,
    file: Option<MediumFile>,
    survey: Option<SurveyMonitor>,
}

/// One reading of the combined signal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sample {
    /// Some source has a backlog: own unsent bytes, qdisc, MAC queue.
    pub busy: bool,
    /// Medium utilisation of the last window, thousandths (0 without a file
    /// or survey).
    pub utilisation: u16,
    /// Windows measured so far: a new window makes a new sample even when
    /// its utilisation repeats, so the engine's average sees every window.
    pub window: u64,
}

/// Whether the link mode uses the busy signal at all.
pub(super) fn medium_aware(plan: &Plan) -> bool {
    matches!(
        plan.link_mode,
        LinkModeCfg::HoldWhileBusy | LinkModeCfg::Adaptive
    )
}

/// Whether the nl80211 survey is a utilisation source: `survey = "auto"`,
/// `link_mode = "adaptive"` (hold-while-busy uses no utilisation), listed
/// interfaces, and no counters file (the file takes precedence).
pub(super) fn survey_wanted(plan: &Plan) -> bool {
    let m = &plan.config.medium;
    m.survey == SurveyCfg::Auto
        && plan.link_mode == LinkModeCfg::Adaptive
        && m.file.is_none()
        && !plan.config.daemon.interfaces.is_empty()
}

impl BusySources {
    /// The sources `[medium]` configures (none unless the link mode is medium-aware).
    pub(super) fn new(plan: &Plan) -> BusySources {
        let m = &plan.config.medium;
        let ifs = &plan.config.daemon.interfaces;
        let on = medium_aware(plan);
        let qdisc = if on && m.qdisc && !ifs.is_empty() {
            match QdiscMonitor::start(ifs.clone(), m.qdisc_interval_us) {
                Ok(q) => Some(q),
                Err(e) => {
                    warn!("qdisc backlog unavailable as a busy source: {e}");
                    None
                }
            }
        } else {
            None
        };
        let file = match (&m.file, on) {
            (Some(f), true) => Some(MediumFile::new(f, m.file_interval_us)),
            _ => None,
        };
        let survey = if survey_wanted(plan) {
            match SurveyMonitor::start(ifs.clone(), Duration::from_micros(m.survey_interval_us)) {
                Ok(s) => Some(s),
                Err(e) => {
                    warn!("nl80211 survey unavailable as a utilisation source: {e}");
                    None
                }
            }
        } else {
            None
        };
        BusySources {
            qdisc,
            file,
            survey,
        }
    }

    /// The `medium` object of `airpack stats --json`: which utilisation
    /// source runs and the survey reader's counters.
    pub(super) fn json(&self) -> Value {
        let source = match (&self.file, &self.survey) {
            (Some(_), _) => "file",
            (None, Some(_)) => "survey",
            (None, None) => "none",
        };
        json!({
            "utilisation_source": source,
            "qdisc": self.qdisc.is_some(),
            "survey": self.survey.as_ref().map(|s| {
                let st = s.stats();
                json!({
                    "utilisation": f64::from(s.utilisation()) / 1000.0,
                    "readings": st.rounds,
                    "windows": st.windows,
                    "errors": {
                        "no_nl80211": st.no_nl80211,
                        "not_wireless": st.not_wireless,
                        "no_busy_time": st.no_busy_time,
                        "no_channel": st.no_channel,
                        "resets": st.resets,
                        "netlink": st.netlink_errors,
                    },
                })
            }),
        })
    }

    /// Reads every source (the qdisc's last published value, the file if its
    /// interval has passed); `held`: packets are held, so the qdisc reader
    /// keeps reading. Never blocks.
    pub(super) fn sample(&mut self, now: u64, outq: usize, held: bool) -> Sample {
        let mut busy = outq > 0;
        if let Some(q) = &self.qdisc {
            if held {
                q.want(now);
            }
            busy |= q.backlog().packets > 0;
        }
        let (mut utilisation, mut window) = (0, 0);
        if let Some(f) = &mut self.file {
            f.poll(now);
            busy |= f.queue_packets() > 0;
            utilisation = f.utilisation();
            window = f.windows;
        } else if let Some(s) = &self.survey {
            utilisation = s.utilisation();
            window = s.windows();
        }
        Sample {
            busy,
            utilisation,
            window,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::config::parse;
    use super::*;

    fn wanted(text: &str) -> bool {
        survey_wanted(&parse("t.toml", text, &[], &[]).unwrap())
    }

    #[test]
    fn survey_runs_only_for_adaptive_with_interfaces_and_no_file() {
        let ifs = "[daemon]\ninterfaces = [\"wlan0\"]\n";
        // The hop-by-hop default (adaptive) with an interface: on.
        assert!(wanted(ifs));
        assert!(!wanted(""), "no interfaces listed");
        assert!(!wanted(&format!("{ifs}[medium]\nsurvey = \"off\"\n")));
        assert!(
            !wanted(&format!("{ifs}[medium]\nfile = \"/dev/shm/A.air\"\n")),
            "the counters file takes precedence"
        );
        for mode in ["hold-while-busy", "fixed"] {
            let t = format!("{ifs}[aggregation]\nlink_mode = \"{mode}\"\n");
            assert!(!wanted(&t), "{mode}");
        }
    }
}
