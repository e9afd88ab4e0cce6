//! The access point's lease table: which stations' ports are multiplexed,
//! under which stream ids, until when. Requests arrive already
//! tag-verified ([`super::register::open`]); this table rejects replays
//! (sequence numbers must grow strictly per station address: a
//! [`ReplayWindow`]'s highest number, kept after the lease ends for
//! as long as the longest lease, so an old recorded request cannot revive
//! it), applies them, keeps the [`Mux`]'s stream table in step and says
//! what to answer.
//!
//! Owns: lease policy (bounds, lengths, expiry), stream-id allocation,
//! "auto" streams. Must not touch: message bytes ([`super::register`]),
//! keys, sockets, clocks (time is passed in).
//!
//! Decisions: one lease per station address (a new register replaces the
//! old one, with new ids); a lease gets `min(asked, max_lease_secs)`; a
//! range maps to consecutive stream ids (one [`Run`]); "auto" streams are
//! found by [`LeaseTable::observe`] (UDP to the station within
//! `auto_ports`), one run each, and multiplexed only from the station's
//! next renew, whose answer lists them (until then they go unicast, so the
//! station never receives an id it cannot map). Requests with a bad
//! address, replays and AP-to-station messages get no answer (no
//! reflection); the errors below are answered.

use super::mux::{Mux, StreamError};
use super::register::{Answer, Body, ErrorCode, Message, Ports, Run, MAX_RUNS};
use super::{StreamId, MAX_STREAM_ID};
use crate::auth::ReplayWindow;
use crate::Micros;
use core::net::IpAddr;

/// Configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Station records (active leases and remembered replay windows).
    pub max_leases: usize,
    /// Stream ids handed out in total (at most [`MAX_STREAM_ID`] + 1).
    pub max_streams: usize,
    /// Longest lease granted (seconds).
    pub max_lease_secs: u16,
    /// Most ports in one range.
    pub max_range: u16,
    /// Ports "auto" leases pick up.
    pub auto_ports: (u16, u16),
    /// Most auto streams per station (at most [`MAX_RUNS`]).
    pub max_auto_streams: usize,
    /// The table's epoch, stated in answers (and written in compact frames by the mux).
    pub epoch: u8,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            max_leases: 256,
            max_streams: 1024,
            max_lease_secs: 600,
            max_range: 128,
            auto_ports: (16_384, 32_767),
            max_auto_streams: MAX_RUNS,
            epoch: 0,
        }
    }
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Leases granted by register.
    pub registered: u64,
    /// Leases extended.
    pub renewed: u64,
    /// Leases ended by unregister.
    pub unregistered: u64,
    /// Leases ended by expiry.
    pub expired: u64,
    /// Requests refused as replays (not answered).
    pub replays: u64,
    /// Messages not meant for the AP (answers) or whose address is not their source (not answered).
    pub ignored: u64,
    /// Error answers.
    pub errors: u64,
    /// Error answers, by [`ErrorCode::ALL`] index (sums to `errors`).
    pub errors_by_code: [u64; 6],
    /// Auto streams found.
    pub auto_found: u64,
}

/// One active lease, as [`LeaseTable::leases`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct LeaseView<'a> {
    /// The station's address.
    pub addr: IpAddr,
    /// Registered with "auto" ports.
    pub auto: bool,
    /// When the lease ends unless renewed.
    pub expires: Micros,
    /// Its runs of ports.
    pub runs: &'a [Run],
    /// Per run: multiplexed now (auto runs wait for the next renew).
    pub live: &'a [bool],
}

#[derive(Clone, Debug)]
struct Record {
    addr: IpAddr,
    window: ReplayWindow,
    active: bool,
    expires: Micros,
    /// Forget the record (and its window) after this.
    keep_until: Micros,
    auto: bool,
    runs: [Run; MAX_RUNS],
    /// The run is in the mux (auto runs wait for a renew).
    live: [bool; MAX_RUNS],
    n_runs: usize,
}

/// The lease table.
#[derive(Debug)]
pub struct LeaseTable {
    cfg: LeaseConfig,
    records: Vec<Record>,
    sid_used: Vec<bool>,
    sids_in_use: usize,
    stats: LeaseStats,
}

const SEC: Micros = 1_000_000;

impl LeaseTable {
    /// An empty table.
    pub fn new(mut cfg: LeaseConfig) -> Self {
        cfg.max_streams = cfg.max_streams.min(usize::from(MAX_STREAM_ID) + 1);
        cfg.max_auto_streams = cfg.max_auto_streams.min(MAX_RUNS);
        LeaseTable {
            sid_used: vec![false; cfg.max_streams],
            records: Vec::with_capacity(cfg.max_leases),
            sids_in_use: 0,
            stats: LeaseStats::default(),
            cfg,
        }
    }

    /// Statistics.
    pub fn stats(&self) -> &LeaseStats {
        &self.stats
    }

    /// Active leases.
    pub fn active(&self) -> usize {
        self.records.iter().filter(|r| r.active).count()
    }

    /// The active leases (for `airpack peers`): address, whether "auto",
    /// when the lease ends, and its runs of (first port, count, first stream
    /// id) that are multiplexed now.
    pub fn leases(&self) -> impl Iterator<Item = LeaseView<'_>> + '_ {
        self.records.iter().filter(|r| r.active).map(|r| LeaseView {
            addr: r.addr,
            auto: r.auto,
            expires: r.expires,
            runs: &r.runs[..r.n_runs],
            live: &r.live[..r.n_runs],
        })
    }

    /// Stream ids handed out.
    pub fn streams(&self) -> usize {
        self.sids_in_use
    }

    /// Applies a tag-verified request that arrived from `from`; returns the
    /// answer's body (`None`: send nothing).
    pub fn handle(
        &mut self,
        now: Micros,
        from: IpAddr,
        m: &Message,
        mux: &mut Mux,
    ) -> Option<Body> {
        self.expire(now, mux);
        let addr = match m.body {
            Body::Register { addr, .. } | Body::Renew { addr, .. } | Body::Unregister { addr } => {
                addr
            }
            _ => {
                self.stats.ignored += 1;
                return None;
            }
        };
        if addr != from {
            self.stats.ignored += 1;
            return None;
        }
        let i = match self.records.iter().position(|r| r.addr == addr) {
            Some(i) => i,
            None => match self.new_record(now, addr) {
                Some(i) => i,
                None => return Some(self.error(m.seq, ErrorCode::TableFull)),
            },
        };
        // Strictly growing: a station sends one request at a time (a retry
        // gets a new number), so no reordering needs tolerating, and an old
        // request that never arrived cannot be played later either.
        let w = &mut self.records[i].window;
        if w.highest().is_some_and(|h| m.seq <= h) || w.check_and_update(m.seq).is_err() {
            self.stats.replays += 1;
            return None;
        }
        let r = match m.body {
            Body::Register {
                ports, lease_secs, ..
            } => self.register(now, i, ports, lease_secs, mux),
            Body::Renew { lease_secs, .. } => self.renew(now, i, lease_secs, mux),
            _ => self.unregister(now, i, mux),
        };
        Some(match r {
            Ok(Some(lease)) => {
                let rec = &self.records[i];
                let mut ans = Answer {
                    reply_to: m.seq,
                    epoch: self.cfg.epoch,
                    lease_secs: lease,
                    n_runs: 0,
                    runs: [Run::default(); MAX_RUNS],
                };
                for (k, run) in rec.runs[..rec.n_runs].iter().enumerate() {
                    if rec.live[k] {
                        ans.runs[usize::from(ans.n_runs)] = *run;
                        ans.n_runs += 1;
                    }
                }
                if matches!(m.body, Body::Register { .. }) {
                    Body::RegisterOk(ans)
                } else {
                    Body::RenewOk(ans)
                }
            }
            Ok(None) => Body::UnregisterOk { reply_to: m.seq },
            Err(code) => self.error(m.seq, code),
        })
    }

    fn error(&mut self, reply_to: u64, code: ErrorCode) -> Body {
        self.stats.errors += 1;
        self.stats.errors_by_code[code.index()] += 1;
        Body::Error { reply_to, code }
    }

    fn new_record(&mut self, now: Micros, addr: IpAddr) -> Option<usize> {
        if self.records.len() >= self.cfg.max_leases {
            // Forget the remembered (inactive) record that would be forgotten first.
            let (k, _) = self
                .records
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.active)
                .min_by_key(|(_, r)| r.keep_until)?;
            self.records.swap_remove(k);
        }
        self.records.push(Record {
            addr,
            window: ReplayWindow::new(),
            active: false,
            expires: now,
            keep_until: now,
            auto: false,
            runs: [Run::default(); MAX_RUNS],
            live: [false; MAX_RUNS],
            n_runs: 0,
        });
        Some(self.records.len() - 1)
    }

    fn grant(&mut self, now: Micros, i: usize, asked: u16) -> Result<u16, ErrorCode> {
        if asked == 0 {
            return Err(ErrorCode::BadRequest);
        }
        let lease = asked.min(self.cfg.max_lease_secs);
        let r = &mut self.records[i];
        r.active = true;
        r.expires = now + u64::from(lease) * SEC;
        r.keep_until = r.expires + u64::from(self.cfg.max_lease_secs) * SEC;
        Ok(lease)
    }

    fn register(
        &mut self,
        now: Micros,
        i: usize,
        ports: Ports,
        asked: u16,
        mux: &mut Mux,
    ) -> Result<Option<u16>, ErrorCode> {
        if asked == 0 {
            return Err(ErrorCode::BadRequest);
        }
        let (first, count) = match ports {
            Ports::Single(p) => (p, 1),
            Ports::Range(f, l) if l >= f => {
                let n = u32::from(l - f) + 1;
                if n > u32::from(self.cfg.max_range) {
                    return Err(ErrorCode::RangeTooLarge);
                }
                (f, n as u16)
            }
            Ports::Range(..) => return Err(ErrorCode::BadRequest),
            Ports::Auto => (0, 0),
        };
        self.release(i, mux);
        let addr = self.records[i].addr;
        if count > 0 {
            let sid = self.alloc(usize::from(count)).ok_or(ErrorCode::TableFull)?;
            for k in 0..count {
                if let Err(e) = mux.add_stream(addr, first + k, sid + k) {
                    for j in 0..k {
                        mux.remove_stream(addr, first + j);
                    }
                    self.free(sid, usize::from(count));
                    return Err(match e {
                        StreamError::Duplicate => ErrorCode::PortsTaken,
                        _ => ErrorCode::TableFull,
                    });
                }
            }
            let r = &mut self.records[i];
            r.runs[0] = Run {
                first_port: first,
                count,
                first_sid: sid,
            };
            r.live[0] = true;
            r.n_runs = 1;
        }
        self.records[i].auto = ports == Ports::Auto;
        self.stats.registered += 1;
        self.grant(now, i, asked).map(Some)
    }

    fn renew(
        &mut self,
        now: Micros,
        i: usize,
        asked: u16,
        mux: &mut Mux,
    ) -> Result<Option<u16>, ErrorCode> {
        if !self.records[i].active {
            return Err(ErrorCode::NoLease);
        }
        let lease = self.grant(now, i, asked)?;
        let r = &mut self.records[i];
        for k in 0..r.n_runs {
            if !r.live[k] {
                let run = r.runs[k];
                r.live[k] = mux
                    .add_stream(r.addr, run.first_port, run.first_sid)
                    .is_ok();
            }
        }
        self.stats.renewed += 1;
        Ok(Some(lease))
    }

    fn unregister(
        &mut self,
        now: Micros,
        i: usize,
        mux: &mut Mux,
    ) -> Result<Option<u16>, ErrorCode> {
        if !self.records[i].active {
            return Err(ErrorCode::NoLease);
        }
        self.release(i, mux);
        let r = &mut self.records[i];
        r.active = false;
        r.keep_until = now + u64::from(self.cfg.max_lease_secs) * SEC;
        self.stats.unregistered += 1;
        Ok(None)
    }

    /// Removes a record's streams from the mux and frees their ids.
    fn release(&mut self, i: usize, mux: &mut Mux) {
        let r = &mut self.records[i];
        let runs = r.runs;
        let live = r.live;
        let n = r.n_runs;
        let addr = r.addr;
        r.n_runs = 0;
        r.live = [false; MAX_RUNS];
        for k in 0..n {
            let run = runs[k];
            if live[k] {
                for j in 0..run.count {
                    mux.remove_stream(addr, run.first_port + j);
                }
            }
            self.free(run.first_sid, usize::from(run.count));
        }
    }

    /// First fit of `n` consecutive free stream ids.
    fn alloc(&mut self, n: usize) -> Option<StreamId> {
        if self.sids_in_use + n > self.cfg.max_streams {
            return None;
        }
        let mut run = 0;
        for s in 0..self.sid_used.len() {
            run = if self.sid_used[s] { 0 } else { run + 1 };
            if run == n {
                let first = s + 1 - n;
                self.sid_used[first..=s].fill(true);
                self.sids_in_use += n;
                return Some(first as StreamId);
            }
        }
        None
    }

    fn free(&mut self, first: StreamId, n: usize) {
        let f = usize::from(first);
        self.sid_used[f..f + n].fill(false);
        self.sids_in_use -= n;
    }

    /// Ends leases whose time is up (their streams leave the mux) and
    /// forgets remembered records; returns the number of leases ended.
    pub fn expire(&mut self, now: Micros, mux: &mut Mux) -> usize {
        let mut ended = 0;
        for i in 0..self.records.len() {
            if self.records[i].active && self.records[i].expires <= now {
                self.release(i, mux);
                self.records[i].active = false;
                ended += 1;
            }
        }
        self.stats.expired += ended as u64;
        self.records.retain(|r| r.active || r.keep_until > now);
        ended
    }

    /// The next time [`LeaseTable::expire`] has work.
    pub fn poll_timeout(&self) -> Option<Micros> {
        self.records
            .iter()
            .map(|r| if r.active { r.expires } else { r.keep_until })
            .min()
    }

    /// Checks a tag-verified loss report that arrived from `from`
    /// ([`Body::Report`], never answered): its address must be its source
    /// and hold an active lease, and its sequence number must be above the
    /// station's last (the replay window requests use). Returns the station
    /// and its counts; `None` (counted as `ignored` or `replays`) otherwise.
    pub fn accept_report(
        &mut self,
        now: Micros,
        from: IpAddr,
        m: &Message,
        mux: &mut Mux,
    ) -> Option<(IpAddr, super::register::LossReport)> {
        self.expire(now, mux);
        let Body::Report { addr, report } = m.body else {
            self.stats.ignored += 1;
            return None;
        };
        let Some(r) = self
            .records
            .iter_mut()
            .find(|r| r.addr == addr && r.active && addr == from)
        else {
            self.stats.ignored += 1;
            return None;
        };
        let w = &mut r.window;
        if w.highest().is_some_and(|h| m.seq <= h) || w.check_and_update(m.seq).is_err() {
            self.stats.replays += 1;
            return None;
        }
        Some((addr, report))
    }

    /// Whether `addr` holds an active lease.
    pub fn is_leased(&self, addr: IpAddr) -> bool {
        self.records.iter().any(|r| r.active && r.addr == addr)
    }

    /// A UDP packet to `dst`:`port` was passed by the mux (not multiplexed):
    /// if `dst` holds an active "auto" lease and `port` is in `auto_ports`,
    /// a stream id is assigned, to be multiplexed from the station's next
    /// renew. Returns the new id.
    pub fn observe(&mut self, dst: IpAddr, port: u16) -> Option<StreamId> {
        let (lo, hi) = self.cfg.auto_ports;
        if !(lo..=hi).contains(&port) {
            return None;
        }
        let i = self
            .records
            .iter()
            .position(|r| r.addr == dst && r.active && r.auto)?;
        let r = &self.records[i];
        if r.n_runs >= self.cfg.max_auto_streams
            || r.runs[..r.n_runs].iter().any(|x| x.first_port == port)
        {
            return None;
        }
        let sid = self.alloc(1)?;
        let r = &mut self.records[i];
        r.runs[r.n_runs] = Run {
            first_port: port,
            count: 1,
            first_sid: sid,
        };
        r.live[r.n_runs] = false;
        r.n_runs += 1;
        self.stats.auto_found += 1;
        Some(sid)
    }
}
