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
//! Must not touch: the engine, the lab (its full parser is
//! `crates/lab/src/air_obs.rs`; this one reads only the channel and queue
//! keys, ignoring the rest, as the format allows).

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
