//! The medium's utilisation from a counters file in the lab's `NODE.air`
//! format (`docs/lab.md` section 2b): the lab's stand-in for nl80211 survey
//! data (channel time, channel time busy) and the MAC queue backlog a driver
//! would show.
//!
//! Owns: a strict parser of the keys the daemon uses ([`AirCounters`]) and
//! [`MediumFile`], which reads the file at most every `interval_us` and
//! keeps the utilisation of the last window (busy time delta over active
//! time delta between two snapshots with different `time_us`).
//!
//! The same file's `peer` lines are the lab's stand-in for nl80211 station
//! info: [`parse_air_peers`] reads them for the link-quality source
//! (`[discovery] radio_file`, `crate::linux::radio`).
//!
//! Must not touch: the engine, the lab (its full parser is
//! `crates/lab/src/air_obs.rs`; this one reads only the channel and queue
//! keys and the peer lines' station figures, ignoring the rest, as the
//! format allows).

use std::io;
use std::path::PathBuf;

/// The counters of one snapshot the daemon uses (all cumulative µs, except
/// the queue, which is current).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AirCounters {
    /// Snapshot time.
    pub time_us: u64,
    /// On-channel time (survey "channel time").
    pub active_us: u64,
    /// Busy time: CCA busy, receiving, transmitting (survey "channel time busy").
    pub busy_us: u64,
    /// Transmitting time (survey "channel time tx").
    pub tx_us: u64,
    /// MPDUs waiting in the MAC queues now.
    pub queue_packets: u64,
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl AirCounters {
    /// Parses a whole `.air` file: version line `airpack-air 1`, then
    /// `key value` lines; each used key exactly once, other keys (and `peer`
    /// lines) ignored.
    pub fn parse(text: &str) -> io::Result<AirCounters> {
        let mut lines = text.lines();
        match lines
            .next()
            .map(str::split_whitespace)
            .map(|mut w| (w.next(), w.next(), w.next()))
        {
            Some((Some("airpack-air"), Some("1"), None)) => {}
            _ => return Err(bad("not an airpack-air 1 file".into())),
        }
        let mut v: [Option<u64>; 5] = [None; 5];
        const KEYS: [&str; 5] = ["time_us", "active_us", "busy_us", "tx_us", "queue_packets"];
        for line in lines {
            let mut w = line.split_whitespace();
            let Some(key) = w.next() else { continue };
            let Some(k) = KEYS.iter().position(|&x| x == key) else {
                continue;
            };
            let n = match (w.next(), w.next()) {
                (Some(n), None) => n
                    .parse::<u64>()
                    .map_err(|_| bad(format!("bad number for {key}")))?,
                _ => return Err(bad(format!("{key}: one value expected"))),
            };
            if v[k].replace(n).is_some() {
                return Err(bad(format!("{key} repeated")));
            }
        }
        let get = |k: usize| v[k].ok_or_else(|| bad(format!("{} missing", KEYS[k])));
        Ok(AirCounters {
            time_us: get(0)?,
            active_us: get(1)?,
            busy_us: get(2)?,
            tx_us: get(3)?,
            queue_packets: get(4)?,
        })
    }
}

/// One `peer` line: what the node's radio reports about a peer (station
/// info: signal of its frames, MAC counters of the node's frames to it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AirPeer {
    /// The peer's radio MAC.
    pub mac: [u8; 6],
    /// Signal of its last frame, dBm.
    pub signal_dbm: f64,
    /// Average signal of its frames (weight 1/8), dBm.
    pub signal_avg_dbm: f64,
    /// Frames received from it without error (0: the signals mean nothing).
    pub rx_frames: u64,
    /// Unicast frames to it acknowledged.
    pub tx_acked: u64,
    /// Retried attempts to it.
    pub tx_retries: u64,
    /// Unicast frames to it given up after the retry limit.
    pub tx_failed: u64,
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in m.iter_mut() {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

const PEER_KEYS: [&str; 6] = [
    "signal_dbm",
    "signal_avg_dbm",
    "rx_frames",
    "tx_acked",
    "tx_retries",
    "tx_failed",
];

fn parse_peer(line: &str) -> io::Result<AirPeer> {
    let mut w = line.split_whitespace().skip(1);
    let mac = w
        .next()
        .and_then(parse_mac)
        .ok_or_else(|| bad(format!("bad peer MAC in {line:?}")))?;
    w.next().ok_or_else(|| bad("peer without a name".into()))?;
    let mut p = AirPeer {
        mac,
        ..AirPeer::default()
    };
    let mut seen = [false; 6];
    while let Some(k) = w.next() {
        let v = w.next().ok_or_else(|| bad(format!("peer {k}: no value")))?;
        let Some(i) = PEER_KEYS.iter().position(|x| *x == k) else {
            continue; // a later version's key
        };
        if std::mem::replace(&mut seen[i], true) {
            return Err(bad(format!("peer {k} repeated")));
        }
        if i < 2 {
            let x: f64 = v.parse().map_err(|_| bad(format!("bad number for {k}")))?;
            if !x.is_finite() {
                return Err(bad(format!("bad number for {k}")));
            }
            if i == 0 {
                p.signal_dbm = x;
            } else {
                p.signal_avg_dbm = x;
            }
        } else {
            let x: u64 = v.parse().map_err(|_| bad(format!("bad number for {k}")))?;
            match i {
                2 => p.rx_frames = x,
                3 => p.tx_acked = x,
                4 => p.tx_retries = x,
                _ => p.tx_failed = x,
            }
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(bad(format!("peer {} missing", PEER_KEYS[i])));
    }
    Ok(p)
}

/// The `peer` lines of a whole `.air` file (version line checked), at most
/// `cap` of them (more are counted in `left_out`). A malformed peer line is
/// an error for the whole file (the reader keeps nothing from it).
pub fn parse_air_peers(
    text: &str,
    out: &mut Vec<AirPeer>,
    cap: usize,
    left_out: &mut u64,
) -> io::Result<()> {
    let mut lines = text.lines();
    match lines
        .next()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
    {
        Some(v) if v == ["airpack-air", "1"] => {}
        _ => return Err(bad("not an airpack-air 1 file".into())),
    }
    for line in lines {
        if line.split_whitespace().next() != Some("peer") {
            continue;
        }
        let p = parse_peer(line)?;
        if out.len() < cap {
            out.push(p);
        } else {
            *left_out += 1;
        }
    }
    Ok(())
}

/// Utilisation in thousandths of `now` against `before` (busy delta over
/// active delta), `None` when the active time did not advance or a counter
/// went back (the writer restarted).
pub fn utilisation(before: &AirCounters, now: &AirCounters) -> Option<u16> {
    let active = now.active_us.checked_sub(before.active_us)?;
    let busy = now.busy_us.checked_sub(before.busy_us)?;
    if active == 0 {
        return None;
    }
    Some((busy.min(active) * 1000 / active) as u16)
}

/// Reads a counters file at most every `interval_us` (see the module documentation).
#[derive(Debug)]
pub struct MediumFile {
    path: PathBuf,
    interval_us: u64,
    next_read: u64,
    last: Option<AirCounters>,
    utilisation: u16,
    queue_packets: u64,
    /// Reads that failed (missing file, malformed contents).
    pub errors: u64,
    /// Windows measured.
    pub windows: u64,
}

impl MediumFile {
    /// A reader of `path`; nothing is read until [`MediumFile::poll`].
    pub fn new(path: impl Into<PathBuf>, interval_us: u64) -> MediumFile {
        MediumFile {
            path: path.into(),
            interval_us,
            next_read: 0,
            last: None,
            utilisation: 0,
            queue_packets: 0,
            errors: 0,
            windows: 0,
        }
    }

    /// Reads the file if `interval_us` has passed since the last read;
    /// returns whether the signal changed. A file that cannot be read or
    /// parsed leaves the utilisation at 0 and the queue empty (never busy on
    /// stale data).
    pub fn poll(&mut self, now: u64) -> bool {
        if now < self.next_read {
            return false;
        }
        self.next_read = now + self.interval_us;
        let before = (self.utilisation, self.queue_packets);
        match std::fs::read_to_string(&self.path).and_then(|t| AirCounters::parse(&t)) {
            Ok(c) => {
                self.queue_packets = c.queue_packets;
                match self.last {
                    Some(l) if l.time_us == c.time_us => {}
                    Some(l) => {
                        if let Some(u) = utilisation(&l, &c) {
                            self.utilisation = u;
                            self.windows += 1;
                        }
                        self.last = Some(c);
                    }
                    None => self.last = Some(c),
                }
            }
            Err(_) => {
                self.errors += 1;
                self.last = None;
                self.utilisation = 0;
                self.queue_packets = 0;
            }
        }
        before != (self.utilisation, self.queue_packets)
    }

    /// Utilisation of the last window, thousandths.
    pub fn utilisation(&self) -> u16 {
        self.utilisation
    }

    /// MPDUs in the radio's MAC queues at the last read.
    pub fn queue_packets(&self) -> u64 {
        self.queue_packets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(time: u64, busy: u64, q: u64) -> String {
        format!(
            "airpack-air 1\nnode A\nmac 02:00:00:00:00:01\ntime_us {time}\nactive_us {time}\nbusy_us {busy}\ntx_us 0\nrx_us 0\nqueue_packets {q}\nqueue_bytes 0\nfuture_key 7\npeer 02:00:00:00:00:02 B signal_dbm -34.0\n"
        )
    }

    #[test]
    fn parses_the_used_keys_strictly() {
        let c = AirCounters::parse(&file(2_000_000, 350_000, 3)).unwrap();
        assert_eq!(
            (c.time_us, c.active_us, c.busy_us, c.queue_packets),
            (2_000_000, 2_000_000, 350_000, 3)
        );
        assert!(AirCounters::parse("airpack-air 2\n").is_err());
        assert!(AirCounters::parse("").is_err());
        let t = file(1, 1, 1);
        assert!(AirCounters::parse(&t.replace("busy_us 1\n", "")).is_err());
        assert!(AirCounters::parse(&t.replace("busy_us 1", "busy_us x")).is_err());
        assert!(AirCounters::parse(&t.replace("busy_us 1", "busy_us 1 2")).is_err());
        assert!(AirCounters::parse(&format!("{t}busy_us 3\n")).is_err());
    }

    #[test]
    fn peer_lines_strictly() {
        let mut out = Vec::new();
        let mut left = 0;
        // The busy-source sample's peer line lacks the counters: refused.
        assert!(parse_air_peers(&file(1, 1, 0), &mut out, 8, &mut left).is_err());
        assert!(out.is_empty());
        let t = "airpack-air 1\nnode A\ntime_us 5\npeer 02:00:00:00:00:02 B signal_dbm -34.0 signal_avg_dbm -35.5 rx_frames 12 tx_acked 97 tx_retries 2 tx_failed 1 later 3\npeer 02:00:00:00:00:0a C signal_dbm -80 signal_avg_dbm -81 rx_frames 0 tx_acked 0 tx_retries 0 tx_failed 0\n";
        parse_air_peers(t, &mut out, 8, &mut left).unwrap();
        assert_eq!(
            out[0],
            AirPeer {
                mac: [2, 0, 0, 0, 0, 2],
                signal_dbm: -34.0,
                signal_avg_dbm: -35.5,
                rx_frames: 12,
                tx_acked: 97,
                tx_retries: 2,
                tx_failed: 1,
            }
        );
        assert_eq!((out.len(), out[1].mac[5]), (2, 10));
        out.clear();
        parse_air_peers(t, &mut out, 1, &mut left).unwrap();
        assert_eq!((out.len(), left), (1, 1));
        for broken in [
            t.replace("tx_failed 1", ""),
            t.replace("tx_failed 1", "tx_failed 1 tx_failed 1"),
            t.replace("-35.5", "inf"),
            t.replace("tx_acked 97", "tx_acked -1"),
            t.replace("02:00:00:00:00:02", "02:00:00:00:00"),
            t.replace("02:00:00:00:00:02", "02:00:00:00:00:002"),
            t.replace("tx_failed 1 later 3", "tx_failed 1 later"),
            t.replace("airpack-air 1", "airpack-air 2"),
        ] {
            assert!(
                parse_air_peers(&broken, &mut Vec::new(), 8, &mut left).is_err(),
                "{broken}"
            );
        }
    }

    #[test]
    fn utilisation_of_a_window() {
        let a = AirCounters {
            active_us: 1_000,
            busy_us: 100,
            ..Default::default()
        };
        let b = AirCounters {
            active_us: 21_000,
            busy_us: 15_100,
            ..Default::default()
        };
        assert_eq!(utilisation(&a, &b), Some(750));
        assert_eq!(utilisation(&b, &a), None);
        assert_eq!(utilisation(&a, &a), None);
    }

    #[test]
    fn medium_file_follows_the_writer() {
        let dir = std::env::temp_dir().join(format!("airpack-busy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("A.air");
        let mut m = MediumFile::new(&path, 1_000);
        // No file yet: idle, counted.
        assert!(!m.poll(0));
        assert_eq!((m.utilisation(), m.errors), (0, 1));
        std::fs::write(&path, file(20_000, 2_000, 0)).unwrap();
        m.poll(1_000);
        assert_eq!(m.utilisation(), 0, "one snapshot is no window");
        std::fs::write(&path, file(40_000, 14_000, 5)).unwrap();
        // Rate limit: not read before the interval has passed.
        assert!(!m.poll(1_500));
        assert!(m.poll(2_000));
        assert_eq!((m.utilisation(), m.queue_packets(), m.windows), (600, 5, 1));
        // Same snapshot again: the window stays.
        m.poll(3_000);
        assert_eq!(m.utilisation(), 600);
        std::fs::write(&path, file(60_000, 15_000, 0)).unwrap();
        m.poll(4_000);
        assert_eq!(m.utilisation(), 50);
        std::fs::write(&path, "garbage").unwrap();
        assert!(m.poll(5_000));
        assert_eq!((m.utilisation(), m.queue_packets()), (0, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
