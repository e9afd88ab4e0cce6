//! The daemon's packet accounting: where every packet went, checked as
//! identities (`accounting` in `airpack stats`, `/metrics`, and the stop log).
//!
//! Owns: [`Accounting`], built from the engine's totals and the daemon's
//! counters ([`DaemonCounters`]), and its JSON form.
//!
//! Must not touch: the counters themselves (it reads a snapshot). Built per
//! control request or at stop, never per packet.

use super::stats::DaemonCounters;
use crate::linux::ErrorKind;
use airpack_core::engine::{Counters, DropReason};
use airpack_core::DecodeError;
use serde_json::{json, Value};

/// Where every packet the daemon handled went, from one consistent snapshot
/// (the engine's and the daemon's counters at the same instant: the event
/// loop is one thread).
///
/// * **send**: packets read from the TUN = sent (in bundles or unchanged) +
///   dropped (by reason) + queued (in the engine now);
/// * **receive**: inner packets of accepted bundles = written into the TUN +
///   dropped (by reason);
/// * **receive_datagrams**: datagrams read from the bundle sockets = bundles
///   accepted + rejected (by reason).
///
/// Losses before the daemon could see a packet are outside these identities
/// and listed apart: the TUN's queue toward the daemon (`tun_queue_drops`,
/// packets) and the bundle sockets' receive queues (`rx_queue_drops`,
/// datagrams: which bundles, so how many packets, cannot be known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accounting {
    /// Packets read from the TUN.
    pub send_in: u64,
    /// Of those, packets sent: inner packets of bundles sent, plus packets sent unchanged.
    pub send_out: u64,
    /// Of those, dropped, by reason.
    pub send_dropped: Vec<(String, u64)>,
    /// Of those, queued in the engine now.
    pub send_queued: u64,
    /// Inner packets of bundles the engine accepted: delivered
    /// (`packets_received`) plus refused on their own (`inner_errors`).
    pub receive_in: u64,
    /// Of those, written into the TUN.
    pub receive_out: u64,
    /// Of those, dropped, by reason.
    pub receive_dropped: Vec<(String, u64)>,
    /// Datagrams read from the bundle sockets.
    pub datagrams_in: u64,
    /// Of those, bundles decoded (`bundles_received`).
    pub datagrams_out: u64,
    /// Of those, rejected, by reason.
    pub datagrams_dropped: Vec<(String, u64)>,
    /// Packets the kernel dropped from the TUN's queue before the daemon read them.
    pub tun_queue_drops: Option<u64>,
    /// Datagrams the bundle sockets' receive queues dropped.
    pub rx_queue_drops: u64,
}

/// Packets and datagrams of the downlink roles (`[ap]`, `[station]`) that
/// join the identities: built on the event loop with the snapshot, added
/// with [`Accounting::add`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// Send side: packets that left.
    pub send_out: u64,
    /// Send side: packets held now.
    pub send_queued: u64,
    /// Send side: packets dropped, by reason.
    pub send_dropped: Vec<(String, u64)>,
    /// Receive side: packets found (extracted).
    pub receive_in: u64,
    /// Receive side: packets written into the TUN.
    pub receive_out: u64,
    /// Receive side: packets dropped, by reason.
    pub receive_dropped: Vec<(String, u64)>,
    /// Datagrams read.
    pub datagrams_in: u64,
    /// Datagrams accepted.
    pub datagrams_out: u64,
    /// Datagrams dropped, by reason.
    pub datagrams_dropped: Vec<(String, u64)>,
}

/// Adds `from` into `to`, reason by reason (a reason appears once).
fn add_reasons(to: &mut Vec<(String, u64)>, from: &[(String, u64)]) {
    for (k, n) in from {
        match to.iter_mut().find(|(j, _)| j == k) {
            Some((_, m)) => *m += n,
            None => to.push((k.clone(), *n)),
        }
    }
}

impl Extra {
    /// Adds `e` (the totals of a role a reload stopped).
    pub fn add(&mut self, e: &Extra) {
        self.send_out += e.send_out;
        self.send_queued += e.send_queued;
        add_reasons(&mut self.send_dropped, &e.send_dropped);
        self.receive_in += e.receive_in;
        self.receive_out += e.receive_out;
        add_reasons(&mut self.receive_dropped, &e.receive_dropped);
        self.datagrams_in += e.datagrams_in;
        self.datagrams_out += e.datagrams_out;
        add_reasons(&mut self.datagrams_dropped, &e.datagrams_dropped);
    }
}

fn sum(v: &[(String, u64)]) -> u64 {
    v.iter().map(|(_, n)| n).sum()
}

impl Accounting {
    /// The accounting of an engine (`engine`: its totals, `queued`: packets
    /// it holds now) and the daemon's counters `d`; `tun_queue_drops` and
    /// `rx_queue_drops` from the kernel.
    pub fn new(
        engine: &Counters,
        queued: u64,
        d: &DaemonCounters,
        tun_queue_drops: Option<u64>,
        rx_queue_drops: u64,
    ) -> Accounting {
        let mut send_dropped: Vec<(String, u64)> = vec![
            ("unparsable".into(), d.tun_unparsable),
            ("link_scoped".into(), d.tun_ignored),
            ("looped".into(), d.tun_looped),
            ("shutdown_discarded".into(), d.shutdown_discarded),
        ];
        for r in DropReason::ALL {
            send_dropped.push((r.reason().into(), engine.dropped[r.index()]));
        }
        for k in ErrorKind::ALL {
            send_dropped.push((
                format!("send_{}", k.name()),
                d.send_failed_packets[k.index()],
            ));
        }
        let mut receive_dropped = vec![("spoofed_source".to_owned(), d.rx_spoofed_source)];
        for k in ErrorKind::ALL {
            receive_dropped.push((
                format!("tun_write_{}", k.name()),
                d.tun_write_errors[k.index()],
            ));
        }
        // Inner packets of accepted bundles refused on their own (the
        // framing was intact): the engine does not count them as received.
        let mut refused_inner = 0;
        for r in DecodeError::ALL {
            refused_inner += engine.inner_errors[r.index()];
            receive_dropped.push((
                format!("inner_{}", r.reason()),
                engine.inner_errors[r.index()],
            ));
        }
        let mut datagrams_dropped = vec![
            ("unknown_peer".to_owned(), d.rx_unknown_peer),
            ("auth_failed".to_owned(), d.rx_auth_failed),
            ("replayed".to_owned(), d.rx_replayed),
        ];
        for r in DecodeError::ALL {
            datagrams_dropped.push((
                format!("decode_{}", r.reason()),
                engine.decode_errors[r.index()],
            ));
        }
        Accounting {
            send_in: d.tun_read,
            send_out: d.bundled_packets_sent + d.unchanged_sent,
            send_dropped,
            send_queued: queued,
            receive_in: engine.packets_received + refused_inner,
            receive_out: d.tun_written,
            receive_dropped,
            datagrams_in: d.rx_datagrams,
            datagrams_out: engine.bundles_received,
            datagrams_dropped,
            tun_queue_drops,
            rx_queue_drops,
        }
    }

    /// Adds the downlink roles' packets and datagrams.
    pub fn add(&mut self, e: &Extra) {
        self.send_out += e.send_out;
        self.send_queued += e.send_queued;
        add_reasons(&mut self.send_dropped, &e.send_dropped);
        self.receive_in += e.receive_in;
        self.receive_out += e.receive_out;
        add_reasons(&mut self.receive_dropped, &e.receive_dropped);
        self.datagrams_in += e.datagrams_in;
        self.datagrams_out += e.datagrams_out;
        add_reasons(&mut self.datagrams_dropped, &e.datagrams_dropped);
    }

    /// Total of [`Accounting::send_dropped`].
    pub fn send_dropped_total(&self) -> u64 {
        sum(&self.send_dropped)
    }

    /// in = out + dropped + queued, on the send side.
    pub fn send_balanced(&self) -> bool {
        self.send_in == self.send_out + self.send_dropped_total() + self.send_queued
    }

    /// in = out + dropped, for inner packets received.
    pub fn receive_balanced(&self) -> bool {
        self.receive_in == self.receive_out + sum(&self.receive_dropped)
    }

    /// in = out + dropped, for datagrams received.
    pub fn datagrams_balanced(&self) -> bool {
        self.datagrams_in == self.datagrams_out + sum(&self.datagrams_dropped)
    }

    /// Every identity holds.
    pub fn balanced(&self) -> bool {
        self.send_balanced() && self.receive_balanced() && self.datagrams_balanced()
    }

    /// Non-zero drop reasons, `reason=n` separated by spaces (`none` if none).
    pub fn nonzero(v: &[(String, u64)]) -> String {
        let parts: Vec<String> = v
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" ")
        }
    }

    /// The `accounting` object of the stats JSON.
    pub fn json(&self) -> Value {
        let map = |v: &[(String, u64)]| {
            Value::Object(
                v.iter()
                    .map(|(k, n)| (k.clone(), Value::from(*n)))
                    .collect(),
            )
        };
        json!({
            "balanced": self.balanced(),
            "send": {
                "in": self.send_in,
                "out": self.send_out,
                "dropped_total": self.send_dropped_total(),
                "queued": self.send_queued,
                "balanced": self.send_balanced(),
                "dropped": map(&self.send_dropped),
            },
            "receive": {
                "in": self.receive_in,
                "out": self.receive_out,
                "dropped_total": sum(&self.receive_dropped),
                "balanced": self.receive_balanced(),
                "dropped": map(&self.receive_dropped),
            },
            "receive_datagrams": {
                "in": self.datagrams_in,
                "out": self.datagrams_out,
                "dropped_total": sum(&self.datagrams_dropped),
                "balanced": self.datagrams_balanced(),
                "dropped": map(&self.datagrams_dropped),
            },
            "before_daemon": {
                "tun_queue_drops": self.tun_queue_drops,
                "rx_queue_drops": self.rx_queue_drops,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::stats::{human_stats, prometheus};

    /// 100 packets read: 60 sent in bundles, 10 unchanged, 5 link-scoped,
    /// 3 queue drops, 2 bundles of 4 packets failed with ENOBUFS, 14 queued.
    fn sample() -> (Counters, DaemonCounters) {
        let mut e = Counters {
            packets_received: 20,
            bundles_received: 4,
            ..Default::default()
        };
        e.dropped[DropReason::QueueBytes.index()] = 3;
        e.decode_errors[DecodeError::Truncated.index()] = 1;
        let mut d = DaemonCounters {
            tun_read: 100,
            tun_ignored: 5,
            bundled_packets_sent: 60,
            unchanged_sent: 10,
            tun_written: 18,
            rx_spoofed_source: 2,
            rx_datagrams: 6,
            rx_unknown_peer: 1,
            ..Default::default()
        };
        let enobufs = std::io::Error::from_raw_os_error(libc::ENOBUFS);
        d.send_error(&enobufs, 4);
        d.send_error(&enobufs, 4);
        (e, d)
    }

    #[test]
    fn identities() {
        let (e, d) = sample();
        let a = Accounting::new(&e, 14, &d, Some(7), 2);
        assert_eq!(a.send_dropped_total(), 5 + 3 + 8);
        assert!(a.send_balanced() && a.receive_balanced() && a.datagrams_balanced());
        let j = a.json();
        assert_eq!(j["send"]["dropped"]["send_enobufs"], 8);
        assert_eq!(j["send"]["dropped"]["queue_bytes"], 3);
        assert_eq!(j["send"]["dropped"]["link_scoped"], 5);
        assert_eq!(j["receive_datagrams"]["dropped"]["decode_truncated"], 1);
        assert_eq!(j["before_daemon"]["tun_queue_drops"], 7);
        assert_eq!(j["balanced"], true);
        let doc = json!({"accounting": j});
        let text = prometheus(&doc);
        assert!(
            text.contains("airpack_accounting_send_balanced 1\n"),
            "{text}"
        );
        assert!(
            text.contains("airpack_accounting_send_dropped_total{reason=\"send_enobufs\"} 8\n"),
            "{text}"
        );
        let human = human_stats(&doc);
        assert!(
            human.contains("send_enobufs=8") && !human.contains("NOT"),
            "{human}"
        );

        // One packet unaccounted anywhere breaks the identity it belongs to.
        for (queued, tun_written, datagrams) in [(13, 18, 6), (14, 17, 6), (14, 18, 7)] {
            let mut d = d.clone();
            d.tun_written = tun_written;
            d.rx_datagrams = datagrams;
            let a = Accounting::new(&e, queued, &d, None, 0);
            assert!(!a.balanced());
            let human = human_stats(&json!({"accounting": a.json()}));
            assert!(human.contains("NOT BALANCED"), "{human}");
        }
        assert_eq!(Accounting::nonzero(&a.receive_dropped), "spoofed_source=2");
    }
}
