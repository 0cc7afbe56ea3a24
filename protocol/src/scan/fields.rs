//! [`Fields`]: the top-level fields of any protobuf message, walked without
//! allocating, each with its byte range; a walk stops at the first error.

use crate::wire::{self, WireError};

/// A malformed packet: what is wrong and at which byte of the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error} at packet byte {offset}")]
pub struct ScanError {
    pub offset: usize,
    pub error: WireError,
}

/// One top-level field: number, wire type, and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawField<'a> {
    pub number: u32,
    /// Byte range of the whole field (tag included) in the message.
    pub start: usize,
    pub end: usize,
    pub value: FieldValue<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'a [u8]),
}

/// Iterates the top-level fields of a protobuf message without allocating.
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    #[inline(always)]
    fn read_field(&mut self) -> Result<RawField<'a>, WireError> {
        let start = self.pos;
        let tag = wire::read_varint(self.buf, &mut self.pos)?;
        let number = u32::try_from(tag >> 3).map_err(|_| WireError::BadWireType(0))?;
        if number == 0 {
            return Err(WireError::FieldZero);
        }
        let value = match (tag & 7) as u8 {
            0 => FieldValue::Varint(wire::read_varint(self.buf, &mut self.pos)?),
            1 => {
                let bytes = self.take(8)?;
                FieldValue::Fixed64(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
            }
            2 => {
                let len = wire::read_varint(self.buf, &mut self.pos)?;
                let available = (self.buf.len() - self.pos) as u64;
                if len > available {
                    return Err(WireError::LengthPastEnd { len, available });
                }
                FieldValue::Len(self.take(len as usize)?)
            }
            5 => {
                let bytes = self.take(4)?;
                FieldValue::Fixed32(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            }
            other => return Err(WireError::BadWireType(other)),
        };
        Ok(RawField {
            number,
            start,
            end: self.pos,
            value,
        })
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<RawField<'a>, ScanError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let start = self.pos;
        match self.read_field() {
            Ok(f) => Some(Ok(f)),
            Err(error) => {
                self.pos = self.buf.len(); // stop after the first error
                Some(Err(ScanError {
                    offset: start,
                    error,
                }))
            }
        }
    }
}
