//! The view of a decoded bundle: [`Bundle`] (framing checked, inner packets
//! delivered or refused on their own), its iterators, and the receive-side
//! filters ([`RxContext`]: RFC 6040 decapsulation, UDP nesting).
//!
//! Owns: what is delivered and what is refused once a format module has
//! checked a bundle's framing. Must not touch: the layouts themselves (the
//! format modules), queues, I/O. Nothing here allocates.

use super::{ip, kau, native, simplemux, DecodeError, Encoding};

/// What the transport knows about a received bundle beyond its payload
/// ([`Encoding::decode_rx`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxContext {
    /// The ECN field of the outer header (0..=3, see [`ip::ecn`]); applied to
    /// the inner packets by RFC 6040's decapsulation rules.
    pub outer_ecn: u8,
    /// With the UDP transport, the daemon's bundle port: an inner UDP packet
    /// to this port would come back as a fresh bundle, so it is refused as
    /// [`DecodeError::Nested`] (the counterpart of protocols 253/254).
    pub udp_port: Option<u16>,
}

/// Extra per-packet checks of a received bundle (see [`RxContext`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// The outer header was CE: a Not-ECT inner packet is refused.
    drop_not_ect: bool,
    /// Inner UDP packets to this port are refused as nested.
    udp_port: Option<u16>,
}

impl Filter {
    fn active(&self) -> bool {
        self.drop_not_ect || self.udp_port.is_some()
    }
}

/// The checks of one inner packet whose framing is intact: `label` is the
/// Simplemux Protocol field that applies to it (ignored by the other
/// encodings). Simplemux: a label other than 4 or 41 is
/// [`DecodeError::Unsupported`]; for 4 and 41 the packet's own version nibble
/// decides (Simplemux itself labels IPv6 packets 4). Then the
/// [`ip::validate_inner`] checks, then the filter's.
#[inline(always)]
pub(crate) fn check_inner(
    enc: Encoding,
    label: u8,
    pkt: &[u8],
    f: &Filter,
) -> Result<(), DecodeError> {
    if enc == Encoding::Simplemux
        && label != simplemux::PROTO_IPV4
        && label != simplemux::PROTO_IPV6
    {
        return Err(DecodeError::Unsupported);
    }
    ip::validate_inner(pkt)?;
    if f.active() {
        check_filter(pkt, f)?;
    }
    Ok(())
}

#[inline(never)]
fn check_filter(pkt: &[u8], f: &Filter) -> Result<(), DecodeError> {
    if f.drop_not_ect && ip::ecn_of(pkt) == ip::ecn::NOT_ECT {
        return Err(DecodeError::CeOnNotEct);
    }
    if let Some(port) = f.udp_port {
        if let Ok(i) = ip::inspect(pkt) {
            if i.protocol == ip::proto::UDP && i.dst_port == Some(port) {
                return Err(DecodeError::Nested);
            }
        }
    }
    Ok(())
}

/// A bundle whose framing is valid: a view over the payload it was decoded
/// from. Inner packets that failed their own checks are *refused*: skipped
/// by [`Bundle::iter`], their reasons given by [`Bundle::refused`].
#[derive(Clone, Copy, Debug)]
pub struct Bundle<'a> {
    encoding: Encoding,
    /// Bytes from the first separator/packet to the end (format header stripped).
    body: &'a [u8],
    /// Inner packets framed (delivered + refused).
    framed: usize,
    /// Inner packets [`Bundle::iter`] hands out.
    delivered: usize,
    /// Simplemux only: the single-protocol bit of the first separator, which
    /// decides whether later separators carry a protocol byte.
    single_protocol: bool,
    filter: Filter,
}

impl<'a> Bundle<'a> {
    /// Constructor for the format modules, after they checked the framing of
    /// `body` (`framed` packets, `refused` of which failed [`check_inner`]).
    pub(crate) fn new(encoding: Encoding, body: &'a [u8], framed: usize, refused: usize) -> Self {
        Bundle {
            encoding,
            body,
            framed,
            delivered: framed - refused,
            single_protocol: false,
            filter: Filter::default(),
        }
    }

    /// Constructor for a Simplemux bundle whose first separator had the
    /// single-protocol bit `spb`.
    pub(crate) fn new_simplemux(body: &'a [u8], framed: usize, refused: usize, spb: bool) -> Self {
        Bundle {
            single_protocol: spb,
            ..Bundle::new(Encoding::Simplemux, body, framed, refused)
        }
    }

    /// Number of inner packets [`Bundle::iter`] hands out.
    pub fn len(&self) -> usize {
        self.delivered
    }

    /// True when no inner packet is handed out (every one was refused).
    pub fn is_empty(&self) -> bool {
        self.delivered == 0
    }

    /// Inner packets framed by the bundle: handed out plus refused.
    pub fn framed(&self) -> usize {
        self.framed
    }

    /// The encoding it was decoded with.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Every framed packet with the Simplemux label that applies to it, refused or not.
    fn frames(&self) -> Frames<'a> {
        Frames {
            encoding: self.encoding,
            rest: self.body,
            left: self.framed,
            first: true,
            single_protocol: self.single_protocol,
            label: 0,
        }
    }

    /// The inner packets that passed their checks, in order, as slices of
    /// the original payload.
    pub fn iter(&self) -> Packets<'a> {
        let careful = self.delivered != self.framed || self.filter.active();
        Packets {
            frames: self.frames(),
            left: self.delivered,
            mode: match self.encoding {
                _ if careful => Mode::Careful,
                Encoding::Native => Mode::Native,
                Encoding::Kau => Mode::Kau,
                Encoding::Simplemux => Mode::Simplemux,
            },
            filter: self.filter,
        }
    }

    /// Why each refused inner packet was refused, in order (nothing when
    /// every packet was delivered). Each refused packet has exactly one reason.
    pub fn refused(&self) -> impl Iterator<Item = DecodeError> + 'a {
        let enc = self.encoding;
        let filter = self.filter;
        let mut frames = self.frames();
        if self.delivered == self.framed {
            frames.left = 0;
        }
        frames.filter_map(move |(label, p)| check_inner(enc, label, p, &filter).err())
    }

    /// Re-counts the delivered packets under `filter`.
    fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        if filter.active() {
            let enc = self.encoding;
            self.delivered = self
                .frames()
                .filter(|&(label, p)| check_inner(enc, label, p, &filter).is_ok())
                .count();
        }
        self
    }
}

impl<'a> IntoIterator for &Bundle<'a> {
    type Item = &'a [u8];
    type IntoIter = Packets<'a>;
    fn into_iter(self) -> Packets<'a> {
        self.iter()
    }
}

/// Walks the framing of a bundle whose framing was checked: every inner
/// packet with its Simplemux label (0 for other encodings).
#[derive(Clone, Debug)]
struct Frames<'a> {
    encoding: Encoding,
    rest: &'a [u8],
    left: usize,
    first: bool,
    single_protocol: bool,
    label: u8,
}

impl<'a> Iterator for Frames<'a> {
    type Item = (u8, &'a [u8]);
    #[inline]
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        if self.left == 0 {
            return None;
        }
        // The framing was checked by `decode`; `split_next` re-walks the same
        // separators and cannot fail, but stays total (returns None) regardless.
        let (pkt, rest) = match self.encoding {
            Encoding::Native => native::split_next(self.rest, self.first)?,
            Encoding::Kau => kau::split_next(self.rest, self.first)?,
            Encoding::Simplemux => {
                let (label, pkt, rest) =
                    simplemux::split_next(self.rest, self.first, self.single_protocol)?;
                if let Some(l) = label {
                    self.label = l;
                }
                (pkt, rest)
            }
        };
        self.first = false;
        self.rest = rest;
        self.left -= 1;
        Some((self.label, pkt))
    }
}

/// Iterator over the delivered inner packets of a [`Bundle`].
#[derive(Clone, Debug)]
pub struct Packets<'a> {
    frames: Frames<'a>,
    /// Delivered packets not yet handed out.
    left: usize,
    /// How the next packet is found.
    mode: Mode,
    filter: Filter,
}

/// [`Packets`]' step: every framed packet is delivered (one mode per
/// encoding, the common case, one match as in a plain walk), or some are
/// refused and each one is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Native,
    Kau,
    Simplemux,
    Careful,
}

impl<'a> Iterator for Packets<'a> {
    type Item = &'a [u8];
    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let f = &mut self.frames;
        let (pkt, rest) = match self.mode {
            Mode::Native => native::split_next(f.rest, f.first)?,
            Mode::Kau => kau::split_next(f.rest, f.first)?,
            Mode::Simplemux => {
                let (_, pkt, rest) = simplemux::split_next(f.rest, f.first, f.single_protocol)?;
                (pkt, rest)
            }
            Mode::Careful => {
                let (label, pkt, rest) = next_passing(
                    f.encoding,
                    f.rest,
                    f.first,
                    f.single_protocol,
                    f.label,
                    self.filter,
                )?;
                f.label = label;
                (pkt, rest)
            }
        };
        f.first = false;
        f.rest = rest;
        self.left -= 1;
        Some(pkt)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// From the walk state of a [`Frames`], the next packet that passes its
/// checks: its label, the packet and the rest of the body after it. Out of
/// line and by value, so that [`Packets::next`] keeps its state in
/// registers in the common case.
#[inline(never)]
fn next_passing(
    encoding: Encoding,
    rest: &[u8],
    first: bool,
    single_protocol: bool,
    label: u8,
    filter: Filter,
) -> Option<(u8, &[u8], &[u8])> {
    let mut frames = Frames {
        encoding,
        rest,
        left: usize::MAX,
        first,
        single_protocol,
        label,
    };
    loop {
        let (label, pkt) = frames.next()?;
        if check_inner(frames.encoding, label, pkt, &filter).is_ok() {
            return Some((label, pkt, frames.rest));
        }
        frames.first = false;
    }
}

impl ExactSizeIterator for Packets<'_> {}

/// [`Encoding::decode_rx`].
pub(super) fn decode_rx(
    enc: Encoding,
    payload: &mut [u8],
    rx: RxContext,
) -> Result<Bundle<'_>, DecodeError> {
    let filter = Filter {
        drop_not_ect: rx.outer_ecn == ip::ecn::CE,
        udp_port: rx.udp_port,
    };
    if rx.outer_ecn != ip::ecn::CE && rx.outer_ecn != ip::ecn::ECT1 {
        let payload: &[u8] = payload;
        return Ok(enc.decode(payload)?.with_filter(filter));
    }
    let (framed, delivered, spb, body_at) = {
        let b = enc.decode(payload)?;
        (
            b.framed,
            b.delivered,
            b.single_protocol,
            payload.len() - b.body.len(),
        )
    };
    let (mut at, mut first, mut label) = (body_at, true, 0u8);
    // One packet per step, by offsets, so the payload can change between steps.
    for _ in 0..framed {
        let mut frames = Frames {
            encoding: enc,
            rest: &payload[at..],
            left: 1,
            first,
            single_protocol: spb,
            label,
        };
        let before = frames.rest.len();
        let Some((l, pkt)) = frames.next() else { break };
        let (start, len) = (at + (before - pkt.len() - frames.rest.len()), pkt.len());
        let ok = check_inner(enc, l, pkt, &Filter::default()).is_ok();
        at += before - frames.rest.len();
        (first, label) = (false, l);
        if ok {
            let pkt = &mut payload[start..start + len];
            if let Some(e) = ip::ecn_decapsulate(rx.outer_ecn, ip::ecn_of(pkt)) {
                ip::set_ecn(pkt, e);
            }
        }
    }
    // Only ECN bits (and IPv4 checksums with them) changed: the framing
    // and every packet's own checks are as decoded above.
    let payload: &[u8] = payload;
    let mut b = Bundle::new(enc, &payload[body_at..], framed, framed - delivered);
    b.single_protocol = spb;
    Ok(b.with_filter(filter))
}
