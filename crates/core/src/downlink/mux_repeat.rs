//! The multiplexer's redundancy step (module doc of [`super`], "Redundancy"):
//! as a frame closes, the entries of the frames before it go in front of its
//! own as repeat blocks, or with partial repeat a rotating window of the
//! previous frame's entries. Only the closing frame's bytes and the history
//! of sent frames are touched.

use super::super::compact;
use super::Mux;

impl Mux {
    /// Redundancy (module doc): puts the entries of the previous frames
    /// in front of the closing frame's own, as many (newest first, at most
    /// the depth) as fit (and, under the airtime rule, keep the frame
    /// paying), and keeps this frame's entries for the next ones.
    pub(super) fn add_repeat(&mut self) {
        let idx = (self.head + self.ready) % self.frames.len();
        let f = &mut self.frames[idx];
        if f.unicast {
            // Not sent: the next frame has nothing to repeat.
            for h in &mut self.history {
                h.seq = None;
            }
            return;
        }
        let h = compact::HEADER_LEN;
        let own = f.len - h;
        self.spare[..own].copy_from_slice(&f.buf[h..f.len]);
        // k blocks: frames seq-1 .. seq-k, contiguous and all in history.
        let (mut k, mut blocks_len, mut count) = (0, 0, f.count);
        for (j, sent) in self.history.iter().enumerate() {
            if sent.seq != Some(f.seq.wrapping_sub(j as u16 + 1)) || sent.len == 0 {
                break;
            }
            let bl = blocks_len + compact::REPEAT_LEN + sent.len;
            let extra = bl + usize::from(j >= 1);
            let fits = f.len + extra <= self.cfg.max_frame
                && count + sent.count <= super::super::MAX_PACKETS_PER_FRAME
                && self.cfg.airtime.map_or(true, |cell| {
                    cell.frame_pays(
                        (f.len + extra) as u32 + self.cfg.frame_overhead,
                        f.unicast_us,
                    )
                });
            if !fits {
                break;
            }
            (k, blocks_len, count) = (j + 1, bl, count + sent.count);
        }
        if k == 0 && self.cfg.partial_repeat {
            let h0 = &self.history[0];
            if h0.seq == Some(f.seq.wrapping_sub(1)) && h0.count > 1 {
                let room = self
                    .cfg
                    .max_frame
                    .saturating_sub(f.len + compact::REPEAT_LEN);
                let n = h0.count;
                let r = self.rotate % n;
                let off = |i: usize| -> usize {
                    let mut at = 0;
                    for _ in 0..i {
                        at +=
                            compact::entry_len(&h0.buf[at..h0.len]).expect("the mux's own entries");
                    }
                    at
                };
                // The window: entries r, r+1, ... (wrapping) while they fit.
                let (mut w, mut bytes, mut at) = (0, 0, off(r));
                while w < n {
                    if r + w == n {
                        at = 0;
                    }
                    let l = compact::entry_len(&h0.buf[at..h0.len]).expect("the mux's own entries");
                    if bytes + l > room || f.count + w + 1 > super::super::MAX_PACKETS_PER_FRAME {
                        break;
                    }
                    (w, bytes, at) = (w + 1, bytes + l, at + l);
                }
                let extra = compact::REPEAT_LEN + bytes;
                let pays = self.cfg.airtime.map_or(true, |cell| {
                    cell.frame_pays(
                        (f.len + extra) as u32 + self.cfg.frame_overhead,
                        f.unicast_us,
                    )
                });
                if w > 0 && pays {
                    // In frame order: [0, r+w-n) then [r, n) when it wraps.
                    let (lo, hi) = if r + w > n {
                        ((0, off(r + w - n)), (off(r), h0.len))
                    } else {
                        ((0, 0), (off(r), off(r + w)))
                    };
                    let hd = compact::HEADER_LEN;
                    f.buf.copy_within(hd..f.len, hd + extra);
                    f.buf[hd..hd + 2].copy_from_slice(&(bytes as u16).to_be_bytes());
                    let mut o = hd + 2;
                    for (a, b) in [lo, hi] {
                        f.buf[o..o + b - a].copy_from_slice(&h0.buf[a..b]);
                        o += b - a;
                    }
                    f.buf[0] |= compact::FLAG_REPEAT;
                    f.len += extra;
                    self.stats.repeated += w as u64;
                    self.stats.partial_repeats += 1;
                    self.rotate = (r + w) % n;
                }
            }
        }
        if k > 0 {
            let extra = blocks_len + usize::from(k >= 2);
            f.buf.copy_within(h..f.len, h + extra);
            let mut at = h;
            if k >= 2 {
                f.buf[0] |= compact::FLAG_DEPTH;
                f.buf[at] = k as u8;
                at += 1;
            }
            // Oldest first: frame seq-k .. seq-1.
            for sent in self.history[..k].iter().rev() {
                f.buf[at..at + 2].copy_from_slice(&(sent.len as u16).to_be_bytes());
                f.buf[at + 2..at + 2 + sent.len].copy_from_slice(&sent.buf[..sent.len]);
                at += compact::REPEAT_LEN + sent.len;
                self.stats.repeated += sent.count as u64;
            }
            f.buf[0] |= compact::FLAG_REPEAT;
            f.len += extra;
        }
        // This frame becomes history[0]; the oldest buffer is reused.
        self.history.rotate_right(1);
        let newest = &mut self.history[0];
        std::mem::swap(&mut newest.buf, &mut self.spare);
        newest.len = own;
        newest.count = f.count;
        newest.seq = Some(f.seq);
    }
}
