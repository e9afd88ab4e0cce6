//! Byte storage for queued packets: one contiguous FIFO per queue.
//!
//! Owns: where a queued packet's bytes live between `handle_packet` and
//! `poll_transmit`. Packets are appended at the tail and removed at the head,
//! so each queue's packets lie back to back from `head`; the metadata queue
//! only needs each packet's length. The buffer keeps its capacity, so steady
//! state does not allocate; dead space at the front is reclaimed by one
//! `copy_within` only when at least half the buffer is dead, which bounds the
//! copying to O(1) amortised per byte and the capacity to a small multiple of
//! the live bytes.
//!
//! Must not touch: policy, statistics or packet contents.

/// A FIFO of byte strings stored back to back (lengths are kept by the caller).
#[derive(Debug, Default)]
pub(crate) struct ByteFifo {
    buf: Vec<u8>,
    head: usize,
}

impl ByteFifo {
    /// Appends `bytes` at the tail.
    #[inline]
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
        } else if self.buf.len() + bytes.len() > self.buf.capacity()
            && self.head * 2 >= self.buf.len()
        {
            let live = self.buf.len() - self.head;
            self.buf.copy_within(self.head.., 0);
            self.buf.truncate(live);
            self.head = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The `len` bytes that start `offset` bytes after the head.
    #[inline]
    pub(crate) fn get(&self, offset: usize, len: usize) -> &[u8] {
        &self.buf[self.head + offset..self.head + offset + len]
    }

    /// Removes `len` bytes from the head.
    #[inline]
    pub(crate) fn pop(&mut self, len: usize) {
        self.head += len;
        if self.head >= self.buf.len() {
            self.buf.clear();
            self.head = 0;
        }
    }

    /// Live bytes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Allocated bytes.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::ByteFifo;

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
