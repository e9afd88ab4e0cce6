//! Radio figures for the link-quality estimate (issue 11 point 4): what the
//! radio reports about each neighbour, matched with the neighbour's IP
//! address through the kernel's neighbour table.
//!
//! Owns: [`RadioMonitor`], a thread that every `interval` dumps the
//! neighbour table (RTM_GETNEIGH over rtnetlink) and the station figures of
//! the configured radios, either from nl80211 (generic netlink: the family
//! lookup, NL80211_CMD_GET_STATION and NL80211_CMD_GET_SURVEY dumps per
//! interface) or from a `NODE.air` file's `peer` lines (the lab's ns-3 air),
//! joins them by MAC address and publishes `(ifindex, IP, RadioReport)`
//! triples with a generation number. Dumps take the RTNL lock (or the
//! wiphy lock) and may wait behind other holders, so they never run on the
//! daemon's loop; the loop only copies the last reading.
//!
//! Degrades without failing: no nl80211 in the kernel, or an interface that
//! is not a wireless one, is counted (`no_nl80211`, `not_wireless`) and
//! logged once; the estimate then uses hellos only. The byte parsers are
//! `airpack_core::netlink` (sans-IO, fuzzed). Must not touch: the neighbour
//! table or the engine (the daemon feeds them), interface configuration.

use super::busy_medium::{parse_air_peers, AirPeer};
use super::cvt_size;
use airpack_core::neighbor::radio::{MacCounters, RadioReport};
use airpack_core::netlink::{neigh, nl80211, NlError};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{info, warn};

/// Most neighbour-table entries and stations kept per reading.
pub const MAX_ENTRIES: usize = 1024;
/// Datagrams one dump may take at most.
const MAX_DUMP_DATAGRAMS: usize = 256;
/// Rounds between two nl80211 family lookups after one failed.
const FAMILY_RETRY_ROUNDS: u64 = 30;
const ENOENT: i32 = 2;

/// Where station figures come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RadioSpec {
    /// nl80211 station info and survey of each interface.
    Nl80211,
    /// The `peer` lines of a `NODE.air` counters file.
    File(PathBuf),
}

/// One station as a source reports it (before matching with an IP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StationFig {
    /// Interface index (0 for the file: the node's one radio).
    pub ifindex: u32,
    /// Its MAC.
    pub mac: [u8; 6],
    /// What the radio says about it (noise: the survey's or the default).
    pub report: RadioReport,
    /// Bytes sent to it, when the radio counts them.
    pub tx_bytes: Option<u64>,
}

/// One published reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// Increases with every reading (0: none yet).
    pub generation: u64,
    /// `(ifindex, neighbour IP, report)` for each resolved neighbour whose
    /// MAC the radio reports.
    pub entries: Vec<(u32, IpAddr, RadioReport)>,
}

/// Counters of the monitor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RadioStats {
    /// Readings published.
    pub rounds: u64,
    /// Stations the radio reported in the last reading.
    pub stations: u64,
    /// Of those, matched with a neighbour's IP.
    pub matched: u64,
    /// nl80211 family lookups that found no nl80211 (cfg80211 absent).
    pub no_nl80211: u64,
    /// Station dumps refused because the interface is not a wireless one.
    pub not_wireless: u64,
    /// Other failed netlink dumps (neighbour table, station, survey).
    pub netlink_errors: u64,
    /// Counters file missing or malformed.
    pub file_errors: u64,
    /// Entries beyond [`MAX_ENTRIES`].
    pub left_out: u64,
}

#[derive(Debug, Default)]
struct Shared {
    reading: Reading,
    stats: RadioStats,
}

/// Reads radio figures off the loop (see the module documentation).
#[derive(Debug)]
pub struct RadioMonitor {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RadioMonitor {
    /// Starts reading `interfaces` from `spec` every `interval`; `noise_dbm`
    /// is reported when the radio gives no noise floor.
    pub fn start(
        interfaces: Vec<String>,
        spec: RadioSpec,
        interval: Duration,
        noise_dbm: i8,
    ) -> io::Result<RadioMonitor> {
        let rt = open_socket(libc::NETLINK_ROUTE)?;
        let genl = match spec {
            RadioSpec::Nl80211 => Some(open_socket(libc::NETLINK_GENERIC)?),
            RadioSpec::File(_) => None,
        };
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("airpack-radio".into())
            .spawn(move || {
                let mut r = Reader {
                    rt,
                    genl,
                    spec,
                    interfaces,
                    noise_dbm,
                    family: None,
                    seq: 0,
                    buf: Vec::with_capacity(64),
                    rx: vec![0u8; 32 * 1024],
                    warned_family: false,
                    warned_if: Vec::new(),
                    round: 0,
                };
                while !st.load(Ordering::Relaxed) {
                    r.round(&s);
                    std::thread::park_timeout(interval);
                }
            })?;
        Ok(RadioMonitor {
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// The last reading if it is newer than generation `seen`.
    pub fn reading_after(&self, seen: u64) -> Option<Reading> {
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        (s.reading.generation > seen).then(|| s.reading.clone())
    }

    /// The counters.
    pub fn stats(&self) -> RadioStats {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stats
            .clone()
    }
}

impl Drop for RadioMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

pub(super) fn open_socket(proto: libc::c_int) -> io::Result<OwnedFd> {
    super::netlink_socket(proto, 500_000)
}

/// A failed dump: the kernel's errno, a malformed answer, or the socket.
#[derive(Debug)]
pub(super) enum DumpError {
    Nl(NlError),
    Io(io::Error),
}

impl std::fmt::Display for DumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpError::Nl(NlError::Errno(e)) => write!(f, "{}", io::Error::from_raw_os_error(*e)),
            DumpError::Nl(e) => write!(f, "malformed answer ({})", e.reason()),
            DumpError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<NlError> for DumpError {
    fn from(e: NlError) -> Self {
        DumpError::Nl(e)
    }
}

impl From<io::Error> for DumpError {
    fn from(e: io::Error) -> Self {
        DumpError::Io(e)
    }
}

/// Sends `req` and hands each datagram of the answer to `parse` until it
/// says the answer is complete. A failed dump leaves nothing unread.
pub(super) fn dump(
    fd: &OwnedFd,
    req: &[u8],
    rx: &mut [u8],
    mut parse: impl FnMut(&[u8]) -> Result<bool, NlError>,
) -> Result<(), DumpError> {
    // SAFETY: req is a valid, initialised byte buffer.
    cvt_size(unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) })?;
    let r = (|| {
        for _ in 0..MAX_DUMP_DATAGRAMS {
            // SAFETY: rx is a valid writable buffer of its length.
            let n = cvt_size(unsafe {
                libc::recv(fd.as_raw_fd(), rx.as_mut_ptr().cast(), rx.len(), 0)
            })?;
            if parse(&rx[..n])? {
                return Ok(());
            }
        }
        Err(DumpError::Nl(NlError::Length))
    })();
    if r.is_err() {
        super::drain(fd, rx);
    }
    r
}

pub(super) fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: c is a valid NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// Whether nl80211 refused a station dump because the interface has no
/// wireless device (ENODEV, EOPNOTSUPP, EINVAL).
pub(super) fn not_wireless(e: &DumpError) -> bool {
    matches!(e, DumpError::Nl(NlError::Errno(19 | 95 | 22)))
}

/// Station figures from a `peer` line (signal only once a frame came).
pub fn air_peer_fig(p: &AirPeer, noise_dbm: i8) -> StationFig {
    let dbm = |x: f64| x.round().clamp(-128.0, 127.0) as i8;
    let heard = p.rx_frames > 0;
    StationFig {
        ifindex: 0,
        mac: p.mac,
        report: RadioReport {
            signal_dbm: heard.then(|| dbm(p.signal_dbm)),
            signal_avg_dbm: heard.then(|| dbm(p.signal_avg_dbm)),
            noise_dbm: Some(noise_dbm),
            mac: Some(MacCounters {
                tx_frames: p.tx_acked.saturating_add(p.tx_failed),
                tx_retries: p.tx_retries,
                tx_failed: p.tx_failed,
            }),
            frame_len: None,
        },
        tx_bytes: None,
    }
}

/// Station figures from an nl80211 station (counters only when all three are there).
pub fn nl80211_fig(ifindex: u32, s: &nl80211::Station, noise_dbm: i8) -> StationFig {
    let mac = match (s.tx_packets, s.tx_retries, s.tx_failed) {
        (Some(p), Some(r), Some(f)) => Some(MacCounters {
            tx_frames: u64::from(p),
            tx_retries: u64::from(r),
            tx_failed: u64::from(f),
        }),
        _ => None,
    };
    StationFig {
        ifindex,
        mac: s.mac,
        report: RadioReport {
            signal_dbm: s.signal_dbm,
            signal_avg_dbm: s.signal_avg_dbm,
            noise_dbm: Some(noise_dbm),
            mac,
            frame_len: None,
        },
        tx_bytes: s.tx_bytes,
    }
}

/// Joins stations with resolved neighbours on `ifindexes` by MAC address:
/// a station of ifindex 0 (the counters file) matches on any of them.
pub fn join(
    ifindexes: &[u32],
    neighbours: &[neigh::Neigh],
    stations: &[StationFig],
) -> Vec<(u32, IpAddr, RadioReport)> {
    let mut out = Vec::new();
    for n in neighbours {
        if !ifindexes.contains(&n.ifindex) {
            continue;
        }
        if let Some(s) = stations
            .iter()
            .find(|s| s.mac == n.mac && (s.ifindex == 0 || s.ifindex == n.ifindex))
        {
            out.push((n.ifindex, n.addr, s.report));
        }
    }
    out
}

struct Reader {
    rt: OwnedFd,
    genl: Option<OwnedFd>,
    spec: RadioSpec,
    interfaces: Vec<String>,
    noise_dbm: i8,
    family: Option<u16>,
    seq: u32,
    buf: Vec<u8>,
    rx: Vec<u8>,
    warned_family: bool,
    warned_if: Vec<String>,
    round: u64,
}

impl Reader {
    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn round(&mut self, shared: &Mutex<Shared>) {
        self.round += 1;
        let mut st = RadioStats::default();
        let ifindexes: Vec<u32> = self.interfaces.iter().map(|n| ifindex(n)).collect();
        let mut neighbours = Vec::new();
        let seq = self.next_seq();
        neigh::dump_request(&mut self.buf, seq);
        if let Err(e) = dump(&self.rt, &self.buf, &mut self.rx, |b| {
            neigh::parse_reply(b, seq, &mut neighbours, MAX_ENTRIES, &mut st.left_out)
        }) {
            st.netlink_errors += 1;
            tracing::debug!("neighbour table dump: {e}");
        }
        let mut stations = Vec::new();
        match self.spec.clone() {
            RadioSpec::File(path) => {
                let mut peers = Vec::new();
                match std::fs::read_to_string(&path)
                    .and_then(|t| parse_air_peers(&t, &mut peers, MAX_ENTRIES, &mut st.left_out))
                {
                    Ok(()) => {
                        stations.extend(peers.iter().map(|p| air_peer_fig(p, self.noise_dbm)))
                    }
                    Err(e) => {
                        st.file_errors += 1;
                        tracing::debug!(file = %path.display(), "radio counters file: {e}");
                    }
                }
            }
            RadioSpec::Nl80211 => self.nl80211(&ifindexes, &mut stations, &mut st),
        }
        st.stations = stations.len() as u64;
        let entries = join(&ifindexes, &neighbours, &stations);
        st.matched = entries.len() as u64;
        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
        let total = &mut s.stats;
        total.rounds += 1;
        total.stations = st.stations;
        total.matched = st.matched;
        total.no_nl80211 += st.no_nl80211;
        total.not_wireless += st.not_wireless;
        total.netlink_errors += st.netlink_errors;
        total.file_errors += st.file_errors;
        total.left_out += st.left_out;
        s.reading = Reading {
            generation: self.round,
            entries,
        };
    }

    fn nl80211(&mut self, ifindexes: &[u32], stations: &mut Vec<StationFig>, st: &mut RadioStats) {
        let Some(genl) = self.genl.take() else { return };
        self.nl80211_on(&genl, ifindexes, stations, st);
        self.genl = Some(genl);
    }

    fn nl80211_on(
        &mut self,
        genl: &OwnedFd,
        ifindexes: &[u32],
        stations: &mut Vec<StationFig>,
        st: &mut RadioStats,
    ) {
        if self.family.is_none() {
            if self.warned_family && self.round % FAMILY_RETRY_ROUNDS != 0 {
                st.no_nl80211 += 1;
                return;
            }
            let seq = self.next_seq();
            nl80211::family_request(&mut self.buf, seq);
            let mut id = None;
            let r = dump(genl, &self.buf, &mut self.rx, |b| {
                id = nl80211::parse_family_reply(b, seq)?;
                Ok(true)
            });
            match (r, id) {
                (Ok(()), Some(f)) => {
                    info!(
                        family = f,
                        "nl80211 found: radio figures for the link estimate"
                    );
                    self.family = Some(f);
                }
                (r, _) => {
                    st.no_nl80211 += 1;
                    if !self.warned_family {
                        self.warned_family = true;
                        let why = match r {
                            Err(DumpError::Nl(NlError::Errno(ENOENT))) => {
                                "no nl80211 in this kernel (cfg80211 not loaded)".to_string()
                            }
                            Err(e) => e.to_string(),
                            Ok(()) => "no family id".into(),
                        };
                        warn!(
                            "no radio figures from nl80211 ({why}): link quality from hellos only"
                        );
                    }
                    return;
                }
            }
        }
        let Some(family) = self.family else { return };
        for (k, &ix) in ifindexes.iter().enumerate() {
            if ix == 0 {
                continue;
            }
            let seq = self.next_seq();
            nl80211::station_dump_request(&mut self.buf, family, seq, ix);
            let mut got = Vec::new();
            let mut left = 0;
            let r = dump(genl, &self.buf, &mut self.rx, |b| {
                nl80211::parse_station_reply(b, family, seq, &mut got, MAX_ENTRIES, &mut left)
            });
            st.left_out += left;
            if let Err(e) = r {
                let name = &self.interfaces[k];
                if not_wireless(&e) {
                    st.not_wireless += 1;
                    if !self.warned_if.contains(name) {
                        self.warned_if.push(name.clone());
                        warn!(interface = %name, "not a wireless interface (nl80211: {e}): link quality from hellos only");
                    }
                } else {
                    st.netlink_errors += 1;
                    tracing::debug!(interface = %name, "station dump: {e}");
                }
                continue;
            }
            // The noise floor of the channel in use, if the driver reports it.
            let seq = self.next_seq();
            nl80211::survey_dump_request(&mut self.buf, family, seq, ix);
            let mut noise = None;
            if dump(genl, &self.buf, &mut self.rx, |b| {
                nl80211::parse_survey_reply(b, family, seq, &mut noise)
            })
            .is_err()
            {
                st.netlink_errors += 1;
            }
            let noise = noise.unwrap_or(self.noise_dbm);
            for s in &got {
                if stations.len() < MAX_ENTRIES {
                    stations.push(nl80211_fig(ix, s, noise));
                }
            }
        }
    }
}
