//! Storage for queued packets: one contiguous byte FIFO per queue
//! ([`ByteFifo`]) and a ring of per-packet records ([`Ring`]).
//!
//! Owns: where a queued packet's bytes and metadata live between
//! `handle_packet` and `poll_transmit`. Packets are appended at the tail and removed at the head,
//! so each queue's packets lie back to back from `head`; the metadata queue
//! only needs each packet's length. The buffer keeps its capacity, so steady
//! state does not allocate; dead space at the front is reclaimed by one
//! `copy_within` only when an append does not fit behind the tail and at least
//! half of the used part is dead, which bounds the copying to O(1) amortised
//! per byte and the capacity to a small multiple of the live bytes.
//!
//! Must not touch: policy, statistics or packet contents.

/// A FIFO of byte strings stored back to back (lengths are kept by the caller).
///
/// `buf` is always fully initialised (its length is the capacity in use); the
/// live bytes are `buf[head..tail]`, so appending is one room check and plain
/// slice copies.
#[derive(Debug, Default)]
pub(crate) struct ByteFifo {
    buf: Vec<u8>,
    head: usize,
    tail: usize,
}

impl ByteFifo {
    /// Appends `bytes` at the tail.
    #[inline]
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        let at = self.reserve(n);
        self.buf[at..at + n].copy_from_slice(bytes);
        self.tail = at + n;
    }

    /// Appends `prefix[..k]` and then `bytes` (a packet behind its separator),
    /// as one record. The short prefix is copied as a whole array (the bytes
    /// after `k` are overwritten by the packet or lie beyond the tail), so no
    /// length-dependent copy is needed for it.
    #[inline(always)]
    pub(crate) fn push_prefixed(&mut self, prefix: &[u8; 4], k: usize, bytes: &[u8]) {
        self.push_prefixed_word(u32::from_le_bytes(*prefix), k, bytes);
    }

    /// [`ByteFifo::push_prefixed`] with the prefix bytes as a little-endian
    /// word (one store).
    #[inline(always)]
    pub(crate) fn push_prefixed_word(&mut self, prefix: u32, k: usize, bytes: &[u8]) {
        const N: usize = 4;
        let k = k.min(N);
        let n = k + bytes.len();
        let at = self.reserve(n.max(N));
        let dst = &mut self.buf[at..at + n.max(N)];
        dst[..N].copy_from_slice(&prefix.to_le_bytes());
        copy_packet(&mut dst[k..n], bytes);
        self.tail = at + n;
    }

    /// Where the next `n` bytes go: `buf[tail..tail + n]` is in bounds afterwards.
    #[inline(always)]
    fn reserve(&mut self, n: usize) -> usize {
        if self.buf.len() - self.tail < n {
            self.make_room(n);
        }
        self.tail
    }

    /// Before appending `n` bytes that do not fit behind the tail: reclaim the
    /// dead front when at least half of the used part is dead, and grow
    /// (at least doubling) if that is not enough.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, n: usize) {
        if self.head * 2 >= self.tail {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        if self.buf.len() - self.tail < n {
            let len = (self.buf.len() * 2).max(self.tail + n).max(64);
            self.buf.resize(len, 0);
        }
    }

    /// The `len` bytes that start `offset` bytes after the head.
    #[inline]
    pub(crate) fn get(&self, offset: usize, len: usize) -> &[u8] {
        &self.live()[offset..offset + len]
    }

    /// All live bytes, head first.
    #[inline]
    pub(crate) fn live(&self) -> &[u8] {
        &self.buf[self.head..self.tail]
    }

    /// Removes `len` bytes from the head (an emptied FIFO restarts at the
    /// beginning of its buffer).
    #[inline]
    pub(crate) fn pop(&mut self, len: usize) {
        self.head += len;
        if self.head >= self.tail {
            self.head = 0;
            self.tail = 0;
        }
    }

    /// Live bytes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tail - self.head
    }

    /// Allocated bytes.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }
}

/// `dst.copy_from_slice(src)`, with packets of 32 to 64 bytes (voice) copied
/// in line as two overlapping 32-byte moves instead of a `memcpy` call.
#[inline(always)]
fn copy_packet(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if (32..=64).contains(&n) && dst.len() == n {
        dst[..32].copy_from_slice(&src[..32]);
        dst[n - 32..].copy_from_slice(&src[n - 32..]);
    } else {
        dst.copy_from_slice(src);
    }
}

/// A FIFO of small `Copy` records in a ring whose capacity is a power of two
/// (so an index wraps with one mask, no branch). It doubles when full
/// (amortised; steady state does not allocate) and never shrinks, so its
/// capacity stays below twice the longest queue seen.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    /// Capacity zero or a power of two; slots outside the live range hold stale values.
    buf: Vec<T>,
    head: usize,
    len: usize,
}

impl<T> Default for Ring<T> {
    fn default() -> Self {
        Ring {
            buf: Vec::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<T: Copy + Default> Ring<T> {
    /// Records queued.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buf.len().wrapping_sub(1)
    }

    /// The `i`-th record from the front.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i < self.len {
            Some(&self.buf[(self.head + i) & self.mask()])
        } else {
            None
        }
    }

    /// The oldest record.
    #[inline]
    pub(crate) fn front(&self) -> Option<&T> {
        self.get(0)
    }

    /// The newest record.
    #[inline]
    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        let i = self.len.checked_sub(1)?;
        let m = self.mask();
        Some(&mut self.buf[(self.head + i) & m])
    }

    /// Appends `v` at the back.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, v: T) {
        if self.len == self.buf.len() {
            self.grow();
        }
        let i = (self.head + self.len) & self.mask();
        self.buf[i] = v;
        self.len += 1;
    }

    /// Removes and returns the oldest record.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.buf[self.head];
        self.head = (self.head + 1) & self.mask();
        self.len -= 1;
        Some(v)
    }

    /// Removes the `n` oldest records (`n <= len`).
    #[inline]
    pub(crate) fn drop_front(&mut self, n: usize) {
        assert!(n <= self.len, "drop_front past the end");
        self.head = (self.head + n) & self.mask();
        self.len -= n;
    }

    /// The records, front to back, as two slices (the second is non-empty
    /// only when the live range wraps around the end of the buffer).
    #[inline]
    pub(crate) fn as_slices(&self) -> (&[T], &[T]) {
        let at = self.head.min(self.buf.len());
        let (wrapped, tail) = self.buf.split_at(at);
        let first = self.len.min(tail.len());
        (&tail[..first], &wrapped[..self.len - first])
    }

    /// Every record, front to back.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        let (a, b) = self.as_slices();
        a.iter().chain(b)
    }

    /// Every record, front to back.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let at = self.head.min(self.buf.len());
        let (wrapped, tail) = self.buf.split_at_mut(at);
        let first = self.len.min(tail.len());
        let rest = self.len - first;
        tail[..first].iter_mut().chain(wrapped[..rest].iter_mut())
    }

    /// Keeps only the records for which `keep` is true, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for _ in 0..self.len {
            let v = self.pop_front().expect("counted");
            if keep(&v) {
                // Never grows: one record was just removed.
                self.push_back(v);
            }
        }
    }

    /// Doubles the capacity (at least 8), moving the live records to the start.
    #[cold]
    fn grow(&mut self) {
        let cap = (self.buf.len() * 2).max(8);
        let mut v = Vec::with_capacity(cap);
        for i in 0..self.len {
            v.push(self.buf[(self.head + i) & self.mask()]);
        }
        v.resize(cap, T::default());
        self.buf = v;
        self.head = 0;
    }

    /// Allocated records.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{ByteFifo, Ring};

    #[test]
    fn ring_matches_vecdeque() {
        // Pushes, pops, multi-drops and in-place edits across many wrap-arounds
        // and growths, against std's VecDeque as the model.
        let mut r: Ring<u32> = Ring::default();
        let mut m = std::collections::VecDeque::new();
        let mut x = 12345u32;
        let mut next = 0u32;
        let mut peak = 0;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            match x % 8 {
                0..=3 => {
                    r.push_back(next);
                    m.push_back(next);
                    next += 1;
                }
                4 | 5 => assert_eq!(r.pop_front(), m.pop_front()),
                6 if x % 64 == 6 => {
                    let odd = x & 64 != 0;
                    r.retain(|v| (v % 2 == 1) == odd);
                    m.retain(|v| (v % 2 == 1) == odd);
                }
                6 => {
                    let n = (x as usize / 8) % (m.len() + 1);
                    r.drop_front(n);
                    m.drain(..n);
                }
                _ => {
                    for v in r.iter_mut() {
                        *v ^= 1;
                    }
                    for v in m.iter_mut() {
                        *v ^= 1;
                    }
                }
            }
            assert_eq!(r.len(), m.len());
            assert!(r.iter().eq(m.iter()));
            peak = peak.max(m.len());
            assert_eq!(r.is_empty(), m.is_empty());
            assert_eq!(r.front(), m.front());
            let k = step as usize % (m.len() + 1);
            assert_eq!(r.get(k), m.get(k));
            assert!(
                r.capacity() <= (2 * peak).max(8),
                "capacity {} for peak {peak}",
                r.capacity()
            );
        }
        assert!(r.iter().eq(m.iter()));
        let (a, b) = r.as_slices();
        assert!(a.iter().chain(b).eq(m.iter()));
        let all: Vec<u32> = r.iter_mut().map(|v| *v).collect();
        assert_eq!(all, m.iter().copied().collect::<Vec<_>>());
    }

    #[test]
    fn copy_packet_copies_every_length() {
        let src: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
        for n in 0..200 {
            let mut dst = vec![0xeeu8; n];
            super::copy_packet(&mut dst, &src[..n]);
            assert_eq!(dst, &src[..n]);
        }
    }

    #[test]
    fn push_prefixed_stores_prefix_then_bytes() {
        let mut f = ByteFifo::default();
        f.push_prefixed(&[1, 2, 3, 4], 2, &[9, 9, 9]);
        f.push_prefixed(&[5, 6, 7, 8], 0, &[7]);
        f.push_prefixed(&[5, 6, 7, 8], 4, &[]);
        assert_eq!(f.live(), &[1, 2, 9, 9, 9, 7, 5, 6, 7, 8]);
        f.pop(5);
        assert_eq!(f.get(0, 1), &[7]);
        f.pop(5);
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn fifo_order_and_bounded_capacity() {
        let mut f = ByteFifo::default();
        let mut lens = std::collections::VecDeque::new();
        let mut next = 0u8;
        let mut expect = 0u8;
        // Keep ~10 packets of varying size live for many rounds; capacity must stay small.
        for round in 0..10_000usize {
            let len = 1 + (round * 7) % 97;
            let pkt: Vec<u8> = (0..len).map(|i| next.wrapping_add(i as u8)).collect();
            f.push(&pkt);
            lens.push_back((len, next));
            next = next.wrapping_add(1);
            if lens.len() > 10 {
                let (l, first) = lens.pop_front().unwrap();
                let got = f.get(0, l);
                assert_eq!(got[0], first);
                assert_eq!(got[l - 1], first.wrapping_add((l - 1) as u8));
                assert_eq!(first, expect);
                expect = expect.wrapping_add(1);
                f.pop(l);
            }
        }
        let live: usize = lens.iter().map(|x| x.0).sum();
        assert_eq!(f.len(), live);
        assert!(
            f.capacity() <= 8 * 97 * 11,
            "capacity {} grew without bound",
            f.capacity()
        );
        for (l, _) in lens.drain(..) {
            f.pop(l);
        }
        assert_eq!(f.len(), 0);
    }
}
