//! The medium's utilisation on real radios (issue 11 point 6): the nl80211
//! survey's channel time and channel busy time of the channel in use, the
//! figures the lab's `NODE.air` file (`busy_medium`) stands in for.
//!
//! Owns: [`SurveyMonitor`], a thread that every `interval` dumps the survey
//! (`NL80211_CMD_GET_SURVEY`) of each configured interface and publishes,
//! in atomics, the utilisation of the last window (Δbusy / Δactive between
//! two readings, [`Window`]) and a window count; with several radios, the
//! highest utilisation of their last windows (the engine has one medium
//! signal per node). Dumps take the wiphy lock (and some drivers ask their
//! firmware), so they never run on the daemon's loop; the loop reads two
//! atomics. [`Window`] is the sans-IO arithmetic (counter resets, an active
//! time that did not advance), unit-tested with synthetic readings.
//!
//! Degrades without failing, as a missing counters file does (utilisation
//! 0, never busy on stale data): no nl80211 in the kernel (`no_nl80211`;
//! every configured interface then also counts as `not_wireless`), an
//! interface that is not a wireless one (`not_wireless`), a driver that
//! reports no busy time (`no_busy_time`), no channel in use (`no_channel`:
//! the interface is down or not joined) are counted and logged once per
//! interface; refused interfaces and the family lookup are asked again only
//! every [`RETRY_ROUNDS`] readings. The byte parser is
//! `airpack_core::netlink::nl80211` (sans-IO, fuzzed).
//!
//! Must not touch: the engine (the daemon feeds it, `runtime::busy`),
//! interface configuration (read-only queries).

#[cfg(not(target_has_atomic = "64"))]
use super::atomic64::AtomicU64;
use super::radio::{dump, ifindex, not_wireless, open_socket, DumpError};
use airpack_core::netlink::{nl80211, NlError};
use std::io;
use std::os::fd::OwnedFd;
#[cfg(target_has_atomic = "64")]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{info, warn};

/// Readings between two attempts on an interface that refused (not
/// wireless, no busy time) and between two nl80211 family lookups.
pub const RETRY_ROUNDS: u64 = 30;
/// Least active time a window spans, ms: the counters count whole
/// milliseconds, so a shorter window is carried into the next reading.
pub const MIN_WINDOW_MS: u64 = 10;
const ENOENT: i32 = 2;

/// Cumulative channel times of the channel in use, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SurveyTimes {
    /// Time on the channel (`SURVEY_INFO_TIME`).
    pub active_ms: u64,
    /// Time the channel was busy (`SURVEY_INFO_TIME_BUSY`).
    pub busy_ms: u64,
}

/// What a reading did to a [`Window`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowStep {
    /// The first reading: no window yet.
    First,
    /// A window closed with this utilisation (thousandths).
    Closed(u16),
    /// Less than [`MIN_WINDOW_MS`] of active time since the window opened:
    /// the window stays open.
    Open,
    /// A counter went back (driver reset, channel switch): the window
    /// restarts from this reading and the utilisation is unknown.
    Reset,
}

/// The utilisation of one interface between successive readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    start: Option<SurveyTimes>,
    /// Utilisation of the last closed window (thousandths); `None` before
    /// the first, after a reset or after [`Window::clear`].
    pub utilisation: Option<u16>,
}

impl Window {
    /// Takes reading `now`.
    pub fn update(&mut self, now: SurveyTimes) -> WindowStep {
        let Some(s) = self.start else {
            self.start = Some(now);
            return WindowStep::First;
        };
        if now.active_ms < s.active_ms || now.busy_ms < s.busy_ms {
            self.start = Some(now);
            self.utilisation = None;
            return WindowStep::Reset;
        }
        let active = now.active_ms - s.active_ms;
        if active < MIN_WINDOW_MS {
            return WindowStep::Open;
        }
        // Busy time beyond the active time (a driver's rounding) counts as all busy.
        let busy = (now.busy_ms - s.busy_ms).min(active);
        let u = (u128::from(busy) * 1000 / u128::from(active)) as u16;
        self.start = Some(now);
        self.utilisation = Some(u);
        WindowStep::Closed(u)
    }

    /// The source stopped answering: forget the window (idle until two new readings).
    pub fn clear(&mut self) {
        *self = Window::default();
    }
}

/// Counters of the monitor (cumulative).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SurveyStats {
    /// Readings done (every interface asked or skipped).
    pub rounds: u64,
    /// Windows closed (all interfaces).
    pub windows: u64,
    /// nl80211 family lookups that found no nl80211 (cfg80211 absent).
    pub no_nl80211: u64,
    /// Survey dumps refused because the interface is not a wireless one
    /// (and, without nl80211, each configured interface per lookup).
    pub not_wireless: u64,
    /// Dumps whose channel in use has no busy time (the driver does not report it).
    pub no_busy_time: u64,
    /// Complete dumps without a channel in use (interface down, not joined).
    pub no_channel: u64,
    /// Counters that went back (the window restarted).
    pub resets: u64,
    /// Other failed dumps (malformed answer, socket errors, timeouts).
    pub netlink_errors: u64,
}

#[derive(Debug, Default)]
struct Shared {
    utilisation: AtomicU64,
    windows: AtomicU64,
    stats: Mutex<SurveyStats>,
    stop: AtomicBool,
}

/// Reads the survey off the loop (see the module documentation).
#[derive(Debug)]
pub struct SurveyMonitor {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl SurveyMonitor {
    /// Starts reading the survey of `interfaces` every `interval`.
    pub fn start(interfaces: Vec<String>, interval: Duration) -> io::Result<SurveyMonitor> {
        let genl = open_socket(libc::NETLINK_GENERIC)?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("airpack-survey".into())
            .spawn(move || {
                let mut r = Reader {
                    genl,
                    radios: interfaces.into_iter().map(Radio::new).collect(),
                    family: None,
                    family_tried: None,
                    warned_family: false,
                    seq: 0,
                    buf: Vec::with_capacity(64),
                    rx: vec![0u8; 32 * 1024],
                    round: 0,
                };
                while !s.stop.load(Ordering::Relaxed) {
                    r.round(&s);
                    std::thread::park_timeout(interval);
                }
            })?;
        Ok(SurveyMonitor {
            shared,
            thread: Some(thread),
        })
    }

    /// Utilisation of the last windows, thousandths (0 while no interface has one).
    pub fn utilisation(&self) -> u16 {
        self.shared.utilisation.load(Ordering::Relaxed) as u16
    }

    /// Windows closed so far.
    pub fn windows(&self) -> u64 {
        self.shared.windows.load(Ordering::Relaxed)
    }

    /// The counters.
    pub fn stats(&self) -> SurveyStats {
        self.shared
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for SurveyMonitor {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Why an interface gives no reading (each logged once per interface).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unusable {
    NotWireless,
    NoBusyTime,
    NoChannel,
}

struct Radio {
    name: String,
    ifindex: u32,
    window: Window,
    /// The last outcome, when it gave no reading.
    unusable: Option<Unusable>,
    /// Round at which a refused interface is asked again.
    retry_at: u64,
    warned: Vec<Unusable>,
    usable_logged: bool,
}

impl Radio {
    fn new(name: String) -> Radio {
        Radio {
            name,
            ifindex: 0,
            window: Window::default(),
            unusable: None,
            retry_at: 0,
            warned: Vec::new(),
            usable_logged: false,
        }
    }

    fn unusable(&mut self, why: Unusable, detail: &str, round: u64) {
        self.window.clear();
        self.unusable = Some(why);
        if why != Unusable::NoChannel {
            self.retry_at = round + RETRY_ROUNDS;
        }
        if self.warned.contains(&why) {
            return;
        }
        self.warned.push(why);
        let name = &self.name;
        match why {
            Unusable::NotWireless => {
                warn!(interface = %name, "not a wireless interface ({detail}): no survey busy time, medium utilisation idle")
            }
            Unusable::NoBusyTime => {
                warn!(interface = %name, "the driver reports no channel busy time in its survey: medium utilisation idle")
            }
            Unusable::NoChannel => {
                info!(interface = %name, "survey: no channel in use (down or not joined): medium utilisation idle until it is")
            }
        }
    }
}

struct Reader {
    genl: OwnedFd,
    radios: Vec<Radio>,
    family: Option<u16>,
    family_tried: Option<u64>,
    warned_family: bool,
    seq: u32,
    buf: Vec<u8>,
    rx: Vec<u8>,
    round: u64,
}

impl Reader {
    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn round(&mut self, shared: &Shared) {
        self.round += 1;
        let mut st = SurveyStats {
            rounds: 1,
            ..SurveyStats::default()
        };
        if let Some(family) = self.family(&mut st) {
            for k in 0..self.radios.len() {
                self.read(k, family, &mut st);
            }
        }
        let u = self
            .radios
            .iter()
            .filter_map(|r| r.window.utilisation)
            .max()
            .unwrap_or(0);
        shared.utilisation.store(u64::from(u), Ordering::Relaxed);
        if st.windows > 0 {
            shared.windows.fetch_add(st.windows, Ordering::Relaxed);
        }
        let mut t = shared.stats.lock().unwrap_or_else(|e| e.into_inner());
        t.rounds += st.rounds;
        t.windows += st.windows;
        t.no_nl80211 += st.no_nl80211;
        t.not_wireless += st.not_wireless;
        t.no_busy_time += st.no_busy_time;
        t.no_channel += st.no_channel;
        t.resets += st.resets;
        t.netlink_errors += st.netlink_errors;
    }

    /// nl80211's family id, looked up once (again every [`RETRY_ROUNDS`]
    /// after a failed lookup). Without it no interface is a wireless one.
    fn family(&mut self, st: &mut SurveyStats) -> Option<u16> {
        if self.family.is_some() {
            return self.family;
        }
        if matches!(self.family_tried, Some(r) if self.round < r + RETRY_ROUNDS) {
            return None;
        }
        self.family_tried = Some(self.round);
        let seq = self.next_seq();
        nl80211::family_request(&mut self.buf, seq);
        let mut id = None;
        let r = dump(&self.genl, &self.buf, &mut self.rx, |b| {
            id = nl80211::parse_family_reply(b, seq)?;
            Ok(true)
        });
        if let (Ok(()), Some(f)) = (&r, id) {
            info!(
                family = f,
                "nl80211 found: survey busy time as the medium's utilisation"
            );
            self.family = Some(f);
            return self.family;
        }
        st.no_nl80211 += 1;
        st.not_wireless += self.radios.len() as u64;
        if !self.warned_family {
            self.warned_family = true;
            let why = match r {
                Err(DumpError::Nl(NlError::Errno(ENOENT))) => {
                    "no nl80211 in this kernel (cfg80211 not loaded)".to_string()
                }
                Err(e) => e.to_string(),
                Ok(()) => "no family id".into(),
            };
            warn!("no survey busy time from nl80211 ({why}): medium utilisation idle");
        }
        None
    }

    /// Dumps interface `k`'s survey and feeds its window.
    fn read(&mut self, k: usize, family: u16, st: &mut SurveyStats) {
        let ix = ifindex(&self.radios[k].name);
        let round = self.round;
        let r = &mut self.radios[k];
        if ix != r.ifindex {
            // Gone, or back with another index: a new window.
            r.ifindex = ix;
            r.window.clear();
            r.unusable = None;
        }
        if ix == 0 || (r.unusable.is_some() && round < r.retry_at) {
            return;
        }
        let seq = self.next_seq();
        nl80211::survey_dump_request(&mut self.buf, family, seq, ix);
        let mut chan = None;
        let res = dump(&self.genl, &self.buf, &mut self.rx, |b| {
            nl80211::parse_survey_in_use(b, family, seq, &mut chan)
        });
        let r = &mut self.radios[k];
        match res {
            Err(e) if not_wireless(&e) => {
                st.not_wireless += 1;
                r.unusable(Unusable::NotWireless, &format!("nl80211: {e}"), round);
            }
            Err(e) => {
                st.netlink_errors += 1;
                r.window.clear();
                tracing::debug!(interface = %r.name, "survey dump: {e}");
            }
            Ok(()) => match chan.map(|c| (c.active_ms, c.busy_ms)) {
                None => {
                    st.no_channel += 1;
                    r.unusable(Unusable::NoChannel, "", round);
                }
                Some((Some(active_ms), Some(busy_ms))) => {
                    r.unusable = None;
                    if !r.usable_logged {
                        r.usable_logged = true;
                        info!(interface = %r.name, "survey busy time: the medium's utilisation source");
                    }
                    match r.window.update(SurveyTimes { active_ms, busy_ms }) {
                        WindowStep::Closed(_) => st.windows += 1,
                        WindowStep::Reset => st.resets += 1,
                        WindowStep::First | WindowStep::Open => {}
                    }
                }
                Some(_) => {
                    st.no_busy_time += 1;
                    r.unusable(Unusable::NoBusyTime, "", round);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(active_ms: u64, busy_ms: u64) -> SurveyTimes {
        SurveyTimes { active_ms, busy_ms }
    }

    #[test]
    fn utilisation_of_successive_readings() {
        let mut w = Window::default();
        assert_eq!(w.update(t(1_000, 100)), WindowStep::First);
        assert_eq!(w.utilisation, None, "one reading is no window");
        // 50 ms on the channel, 30 of them busy: 600 thousandths.
        assert_eq!(w.update(t(1_050, 130)), WindowStep::Closed(600));
        // The active time did not advance (or by less than 10 ms): the
        // window stays open and the last utilisation stands.
        assert_eq!(w.update(t(1_050, 130)), WindowStep::Open);
        assert_eq!(w.update(t(1_059, 139)), WindowStep::Open);
        assert_eq!(w.utilisation, Some(600));
        // ... and the next window spans both readings: 20 of 100 ms busy.
        assert_eq!(w.update(t(1_150, 150)), WindowStep::Closed(200));
        // Busy beyond active (driver rounding) is all busy, never above 1000.
        assert_eq!(w.update(t(1_170, 175)), WindowStep::Closed(1000));
        // An idle channel.
        assert_eq!(w.update(t(1_270, 175)), WindowStep::Closed(0));
    }

    #[test]
    fn counter_resets_restart_the_window() {
        let mut w = Window::default();
        w.update(t(5_000, 4_000));
        assert_eq!(w.update(t(5_100, 4_090)), WindowStep::Closed(900));
        // A channel switch zeroes the counters: unknown until a new window.
        assert_eq!(w.update(t(20, 2)), WindowStep::Reset);
        assert_eq!(w.utilisation, None);
        assert_eq!(w.update(t(120, 52)), WindowStep::Closed(500));
        // Only the busy counter went back: a reset too.
        assert_eq!(w.update(t(220, 10)), WindowStep::Reset);
        assert_eq!(w.update(t(320, 10)), WindowStep::Closed(0));
        // Near the top of u64 without overflow, a window of any length.
        let mut w = Window::default();
        w.update(t(u64::MAX - 1_000, u64::MAX - 1_000));
        assert_eq!(
            w.update(t(u64::MAX, u64::MAX - 500)),
            WindowStep::Closed(500)
        );
        let mut w = Window::default();
        w.update(t(0, 0));
        assert_eq!(
            w.update(t(16_000_000_000_000_000_000, 4_000_000_000_000_000_000)),
            WindowStep::Closed(250)
        );
        w.clear();
        assert_eq!(
            (w.utilisation, w.update(t(1, 1))),
            (None, WindowStep::First)
        );
    }
}
