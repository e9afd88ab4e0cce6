//! A 64-bit counter cell for targets without 64-bit atomics (32-bit MIPS):
//! the few `AtomicU64` methods the qdisc monitor uses, behind a mutex.
//!
//! Owns: [`AtomicU64`]. Used only where `target_has_atomic = "64"` is false
//! (elsewhere the standard type is used); compiled and tested everywhere.
//! Must not be used on a per-packet path (a lock per call).
#![cfg_attr(target_has_atomic = "64", allow(dead_code))]

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

/// `std::sync::atomic::AtomicU64`'s `load`, `store`, `swap`, `fetch_add`
/// (wrapping), with the ordering ignored (a mutex orders more strongly).
#[derive(Debug, Default)]
pub struct AtomicU64(Mutex<u64>);

impl AtomicU64 {
    fn lock(&self) -> MutexGuard<'_, u64> {
        // A panic while holding it cannot leave a u64 half-written.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn load(&self, _: Ordering) -> u64 {
        *self.lock()
    }

    pub fn store(&self, v: u64, _: Ordering) {
        *self.lock() = v;
    }

    pub fn swap(&self, v: u64, _: Ordering) -> u64 {
        std::mem::replace(&mut *self.lock(), v)
    }

    pub fn fetch_add(&self, v: u64, _: Ordering) -> u64 {
        let mut g = self.lock();
        let old = *g;
        *g = old.wrapping_add(v);
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_the_standard_atomic() {
        let a = AtomicU64::default();
        assert_eq!(a.load(Ordering::Relaxed), 0);
        a.store(u64::MAX - 1, Ordering::Relaxed);
        let s = std::sync::atomic::AtomicU64::new(u64::MAX - 1);
        let o = Ordering::Relaxed;
        assert_eq!(a.fetch_add(3, o), s.fetch_add(3, o));
        assert_eq!(a.load(o), s.load(o));
        assert_eq!(a.load(o), 1, "wraps");
        assert_eq!(a.swap(1 << 40, o), s.swap(1 << 40, o));
        a.store(7, o);
        assert_eq!(a.load(o), 7);
    }
}
