//! Netlink attributes (TLVs) as ipset uses them: integers in network byte
//! order flagged as such, nests flagged as nests, strings NUL-terminated.
//! The kernel rejects a port or an address without the byte-order flag
//! (`IPSET_ERR_PROTOCOL`), so the writer sets it wherever ipset expects it.

use super::DecodeError;

const NLA_F_NESTED: u16 = 0x8000;
const NLA_F_NET_BYTEORDER: u16 = 0x4000;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);
const NLA_HEADER_LEN: usize = 4;
const NLA_ALIGN: usize = 4;

pub(crate) fn align(len: usize) -> usize {
    len.div_ceil(NLA_ALIGN) * NLA_ALIGN
}

/// Appends attributes to a message being built.
pub(crate) struct AttrWriter<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> AttrWriter<'a> {
    pub(crate) fn new(buf: &'a mut Vec<u8>) -> Self {
        Self { buf }
    }

    fn put(&mut self, kind: u16, payload: &[u8]) {
        // Payloads here are a few bytes (names are at most 32), so the
        // length always fits the 16-bit field.
        let len = (NLA_HEADER_LEN + payload.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.pad();
    }

    fn pad(&mut self) {
        let padded = align(self.buf.len());
        self.buf.resize(padded, 0);
    }

    pub(crate) fn u8(&mut self, kind: u16, value: u8) {
        self.put(kind, &[value]);
    }

    pub(crate) fn be16(&mut self, kind: u16, value: u16) {
        self.put(kind | NLA_F_NET_BYTEORDER, &value.to_be_bytes());
    }

    pub(crate) fn be32(&mut self, kind: u16, value: u32) {
        self.put(kind | NLA_F_NET_BYTEORDER, &value.to_be_bytes());
    }

    /// Raw bytes already in network order (an address).
    pub(crate) fn net_bytes(&mut self, kind: u16, value: &[u8]) {
        self.put(kind | NLA_F_NET_BYTEORDER, value);
    }

    pub(crate) fn cstr(&mut self, kind: u16, value: &str) {
        let mut payload = Vec::with_capacity(value.len() + 1);
        payload.extend_from_slice(value.as_bytes());
        payload.push(0);
        self.put(kind, &payload);
    }

    /// A nest whose content `fill` writes; its length is patched after.
    pub(crate) fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut Self)) {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        fill(self);
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }
}

/// One attribute of a received message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attr<'a> {
    /// The type with the nest and byte-order flags masked off.
    pub kind: u16,
    pub payload: &'a [u8],
}

impl<'a> Attr<'a> {
    pub(crate) fn u8(&self) -> Result<u8, DecodeError> {
        match self.payload {
            [v, ..] => Ok(*v),
            [] => Err(self.short(1)),
        }
    }

    pub(crate) fn be16(&self) -> Result<u16, DecodeError> {
        match self.payload {
            [a, b, ..] => Ok(u16::from_be_bytes([*a, *b])),
            _ => Err(self.short(2)),
        }
    }

    pub(crate) fn be32(&self) -> Result<u32, DecodeError> {
        match self.payload {
            [a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
            _ => Err(self.short(4)),
        }
    }

    /// A name as text whatever its bytes: a foreign set's odd name must
    /// not make the listing of ours fail.
    pub(crate) fn cstr_lossy(&self) -> String {
        let bytes = match self.payload.iter().position(|b| *b == 0) {
            Some(end) => &self.payload[..end],
            None => self.payload,
        };
        String::from_utf8_lossy(bytes).into_owned()
    }

    pub(crate) fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.payload)
    }

    fn short(&self, want: usize) -> DecodeError {
        DecodeError::AttrTooShort {
            attr: self.kind,
            len: self.payload.len(),
            want,
        }
    }
}

/// Walks a run of attributes; a malformed one ends the walk with an error.
#[derive(Debug, Clone)]
pub(crate) struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Attrs<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { rest: buf }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let (len, kind) = match self.rest {
            [l0, l1, t0, t1, ..] => (
                usize::from(u16::from_ne_bytes([*l0, *l1])),
                u16::from_ne_bytes([*t0, *t1]),
            ),
            _ => {
                let remaining = self.rest.len();
                self.rest = &[];
                return Some(Err(DecodeError::Truncated {
                    what: "attribute header",
                    len: remaining,
                }));
            }
        };
        let Some(payload) = self.rest.get(NLA_HEADER_LEN..len) else {
            let remaining = self.rest.len();
            self.rest = &[];
            return Some(Err(DecodeError::BadAttrLength {
                len,
                available: remaining,
            }));
        };
        // The last attribute may omit its padding.
        self.rest = self.rest.get(align(len)..).unwrap_or(&[]);
        Some(Ok(Attr {
            kind: kind & NLA_TYPE_MASK,
            payload,
        }))
    }
}
