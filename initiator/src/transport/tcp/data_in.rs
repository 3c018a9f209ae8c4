//! A read's data as its C2HData PDUs arrive: into the caller's buffer or receive target, else
//! gathered into one buffer of the transfer's size (also where a payload received straight from
//! the socket goes).

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};

use crate::transport::target::RecvTarget;

#[derive(Default)]
pub(super) enum DataIn {
    #[default]
    Empty,
    Buffer(BytesMut),
    /// The caller's memory, `filled` bytes received so far.
    Target {
        target: RecvTarget,
        filled: usize,
    },
}

/// Where a directly received payload goes, lent out of its command meanwhile.
pub(super) enum Lent {
    Buffer(BytesMut),
    Target { target: RecvTarget, filled: usize },
}

impl DataIn {
    /// Data lands in `buf` (cleared first).
    pub(super) fn into_buffer(mut buf: BytesMut) -> DataIn {
        buf.clear();
        DataIn::Buffer(buf)
    }

    pub(super) fn into_target(target: RecvTarget) -> DataIn {
        DataIn::Target { target, filled: 0 }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            DataIn::Empty => 0,
            DataIn::Buffer(b) => b.len(),
            DataIn::Target { filled, .. } => *filled,
        }
    }

    /// Appends `data`; `total` is the transfer's length (the gathering buffer's size). The
    /// caller checked that it fits.
    pub(super) fn push(&mut self, data: &[u8], total: usize) {
        match self {
            DataIn::Empty => {
                let mut buf = BytesMut::with_capacity(total);
                buf.extend_from_slice(data);
                *self = DataIn::Buffer(buf);
            }
            DataIn::Buffer(buf) => buf.extend_from_slice(data),
            DataIn::Target { target, filled } => {
                target.write_at(*filled, data);
                *filled += data.len();
            }
        }
    }

    /// Where to receive into, with room for `total` bytes and what arrived so far at its front;
    /// `self` is left empty until it is put back (`Lent::into`).
    pub(super) fn take_buffer(&mut self, total: usize) -> Lent {
        let mut buf = match std::mem::take(self) {
            DataIn::Empty => BytesMut::new(),
            DataIn::Buffer(buf) => buf,
            DataIn::Target { target, filled } => return Lent::Target { target, filled },
        };
        buf.reserve(total.saturating_sub(buf.len()));
        Lent::Buffer(buf)
    }

    /// The data as the completion carries it (empty for a receive target: the data is there).
    pub(super) fn freeze(self) -> Bytes {
        match self {
            DataIn::Empty | DataIn::Target { .. } => Bytes::new(),
            DataIn::Buffer(b) => b.freeze(),
        }
    }
}

impl From<Lent> for DataIn {
    fn from(lent: Lent) -> DataIn {
        match lent {
            Lent::Buffer(b) => DataIn::Buffer(b),
            Lent::Target { target, filled } => DataIn::Target { target, filled },
        }
    }
}

impl Lent {
    pub(super) fn len(&self) -> usize {
        match self {
            Lent::Buffer(b) => b.len(),
            Lent::Target { filled, .. } => *filled,
        }
    }

    /// What was received so far.
    pub(super) fn filled(&self) -> &[u8] {
        match self {
            Lent::Buffer(b) => b,
            Lent::Target { target, filled } => target.filled(*filled),
        }
    }
}

// SAFETY: chunk_mut hands out the unwritten rest of the buffer or target, advance_mut moves the
// filled mark within it.
unsafe impl BufMut for Lent {
    fn remaining_mut(&self) -> usize {
        match self {
            Lent::Buffer(b) => b.remaining_mut(),
            Lent::Target { target, filled } => target.len() - *filled,
        }
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        match self {
            Lent::Buffer(b) => b.advance_mut(cnt),
            Lent::Target { target, filled } => {
                assert!(
                    *filled + cnt <= target.len(),
                    "advance past the receive target"
                );
                *filled += cnt;
            }
        }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        match self {
            Lent::Buffer(b) => b.chunk_mut(),
            Lent::Target { target, filled } => {
                // SAFETY: the unfilled rest of the target, which only this command writes.
                unsafe {
                    UninitSlice::from_raw_parts_mut(
                        target.ptr().add(*filled),
                        target.len() - *filled,
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pdu_or_several_are_gathered() {
        let mut one = DataIn::default();
        one.push(b"abcdef", 6);
        assert_eq!(&one.freeze()[..], b"abcdef");

        let mut three = DataIn::default();
        for part in [&b"ab"[..], b"cd", b"ef"] {
            three.push(part, 6);
        }
        assert_eq!(three.len(), 6);
        assert_eq!(&three.freeze()[..], b"abcdef");
    }

    #[test]
    fn the_callers_buffer_is_filled_and_given_back() {
        let mut buf = BytesMut::with_capacity(8);
        buf.extend_from_slice(b"old");
        let at = buf.as_ptr();
        let mut data = DataIn::into_buffer(buf);
        assert_eq!(data.len(), 0, "cleared");
        data.push(b"abc", 6);
        let mut taken = data.take_buffer(6);
        assert_eq!(taken.filled(), b"abc");
        taken.put_slice(b"def");
        let data = DataIn::from(taken);
        let back = data.freeze().try_into_mut().expect("unique");
        assert_eq!(&back[..], b"abcdef");
        assert_eq!(back.as_ptr(), at, "the same memory, no copy");
    }
}
