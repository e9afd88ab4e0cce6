//! The daemon's busy signal, combined from its sources (issue 11 point 6):
//! its own sockets' unsent bytes (SIOCOUTQ), the radios' root qdisc backlog
//! (`[medium] qdisc`, read off the loop by [`QdiscMonitor`]) and a medium
//! counters file (`[medium] file`: utilisation and MAC queue, the lab's
//! stand-in for nl80211 survey and driver queue data).
//!
//! Owns: the sources and their combination into `(busy, utilisation)` for
//! `Engine::set_medium`. Must not touch: the engine's policy (what a busy
//! link or a utilisation means is the engine's `LinkMode`), sockets or
//! timers of the loop.

use super::super::config::{LinkModeCfg, Plan};
use crate::linux::busy::{MediumFile, QdiscMonitor};
use tracing::warn;

/// The busy-signal sources of a running daemon.
pub(super) struct BusySources {
    qdisc: Option<QdiscMonitor>,
    file: Option<MediumFile>,
}

/// One reading of the combined signal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sample {
    /// Some source has a backlog: own unsent bytes, qdisc, MAC queue.
    pub busy: bool,
    /// Medium utilisation of the last window, thousandths (0 without a file).
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
        BusySources { qdisc, file }
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
        }
        Sample {
            busy,
            utilisation,
            window,
        }
    }
}
