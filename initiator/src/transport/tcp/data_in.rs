//! A read's data as its C2HData PDUs arrive. The target usually sends a read in one PDU: its
//! data is then kept where the receive buffer has it (no copy, no allocation of its own); data
//! in several PDUs is gathered into one buffer.

use bytes::{Bytes, BytesMut};

#[derive(Default)]
pub(super) enum DataIn {
    #[default]
    Empty,
    One(Bytes),
    Gathered(BytesMut),
}

impl DataIn {
    pub(super) fn len(&self) -> usize {
        match self {
            DataIn::Empty => 0,
            DataIn::One(b) => b.len(),
            DataIn::Gathered(b) => b.len(),
        }
    }

    /// Appends `data`; `total` is the transfer's length (the gathering buffer's size).
    pub(super) fn push(&mut self, data: Bytes, total: usize) {
        match std::mem::take(self) {
            DataIn::Empty => *self = DataIn::One(data),
            DataIn::One(first) => {
                let mut all = BytesMut::with_capacity(total.max(first.len() + data.len()));
                all.extend_from_slice(&first);
                all.extend_from_slice(&data);
                *self = DataIn::Gathered(all);
            }
            DataIn::Gathered(mut all) => {
                all.extend_from_slice(&data);
                *self = DataIn::Gathered(all);
            }
        }
    }

    pub(super) fn freeze(self) -> Bytes {
        match self {
            DataIn::Empty => Bytes::new(),
            DataIn::One(b) => b,
            DataIn::Gathered(b) => b.freeze(),
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
}
