//! A read's data as its C2HData PDUs arrive. Without a buffer of the caller's, data that came in
//! one PDU is kept where the receive buffer has it (no copy, no allocation of its own); data in
//! several PDUs is gathered into one buffer. With the caller's buffer (or once the payload is
//! received straight from the socket), data goes into that buffer.

use bytes::{Bytes, BytesMut};

#[derive(Default)]
pub(super) enum DataIn {
    #[default]
    Empty,
    One(Bytes),
    Buffer(BytesMut),
}

impl DataIn {
    /// Data lands in `buf` (cleared first).
    pub(super) fn into_buffer(mut buf: BytesMut) -> DataIn {
        buf.clear();
        DataIn::Buffer(buf)
    }

    pub(super) fn len(&self) -> usize {
        match self {
            DataIn::Empty => 0,
            DataIn::One(b) => b.len(),
            DataIn::Buffer(b) => b.len(),
        }
    }

    /// Appends `data`; `total` is the transfer's length (the gathering buffer's size).
    pub(super) fn push(&mut self, data: Bytes, total: usize) {
        match self {
            DataIn::Empty => *self = DataIn::One(data),
            DataIn::Buffer(buf) => buf.extend_from_slice(&data),
            DataIn::One(_) => {
                let mut buf = self.take_buffer(total);
                buf.extend_from_slice(&data);
                *self = DataIn::Buffer(buf);
            }
        }
    }

    /// The buffer to receive into, with room for `total` bytes and what arrived so far at its
    /// front; `self` is left empty until the buffer is put back (`DataIn::Buffer`).
    pub(super) fn take_buffer(&mut self, total: usize) -> BytesMut {
        let mut buf = match std::mem::take(self) {
            DataIn::Empty => BytesMut::new(),
            DataIn::One(first) => {
                let mut buf = BytesMut::with_capacity(total.max(first.len()));
                buf.extend_from_slice(&first);
                buf
            }
            DataIn::Buffer(buf) => buf,
        };
        buf.reserve(total.saturating_sub(buf.len()));
        buf
    }

    pub(super) fn freeze(self) -> Bytes {
        match self {
            DataIn::Empty => Bytes::new(),
            DataIn::One(b) => b,
            DataIn::Buffer(b) => b.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pdu_is_kept_and_several_are_gathered() {
        let mut one = DataIn::default();
        let pdu = Bytes::from_static(b"abcdef");
        one.push(pdu.clone(), 6);
        let kept = one.freeze();
        assert_eq!(kept.as_ptr(), pdu.as_ptr(), "no copy");

        let mut three = DataIn::default();
        for part in [&b"ab"[..], b"cd", b"ef"] {
            three.push(Bytes::copy_from_slice(part), 6);
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
        data.push(Bytes::from_static(b"abc"), 6);
        let mut taken = data.take_buffer(6);
        assert_eq!(&taken[..], b"abc");
        taken.extend_from_slice(b"def");
        let data = DataIn::Buffer(taken);
        let back = data.freeze().try_into_mut().expect("unique");
        assert_eq!(&back[..], b"abcdef");
        assert_eq!(back.as_ptr(), at, "the same memory, no copy");
    }
}
