//! Small helpers shared by the attribute decoders and encoders.

use netlink_packet_core::{
    DecodeError, Emitable, ErrorContext, Nla, NlaBuffer, NlasIterator,
};

/// Decode every attribute of a nested block (or a message body), stopping at
/// the first malformed one. `what` names the block in the error.
pub(crate) fn parse_all<T, F>(
    buf: &[u8],
    what: &str,
    mut parse: F,
) -> Result<Vec<T>, DecodeError>
where
    F: FnMut(&NlaBuffer<&[u8]>) -> Result<T, DecodeError>,
{
    NlasIterator::new(buf)
        .map(|nla| nla.and_then(|nla| parse(&nla)))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("failed to parse {what} attributes"))
}

/// Length of a list of attributes once emitted.
pub(crate) fn nlas_len<T: Nla>(nlas: &[T]) -> usize {
    nlas.iter().map(Emitable::buffer_len).sum()
}

/// Emit a list of attributes back to back. The caller sized `buffer` with
/// [`nlas_len`], so the slices below stay in bounds.
pub(crate) fn emit_nlas<T: Nla>(nlas: &[T], buffer: &mut [u8]) {
    let mut start = 0;
    for nla in nlas {
        let end = start + nla.buffer_len();
        if let Some(slot) = buffer.get_mut(start..end) {
            nla.emit(slot);
        }
        start = end;
    }
}

/// Takes the result of a fixed-width write into an attribute's value,
/// which cannot fail: `emit_value` gets a buffer sized by `value_len`.
pub(crate) fn fits<E>(_written: Result<(), E>) {}

/// Value length of a NUL-terminated string attribute.
pub(crate) fn string_len(value: &str) -> usize {
    value.len() + 1
}

/// Copy a string and its terminating NUL into an attribute value.
pub(crate) fn emit_string(value: &str, buffer: &mut [u8]) {
    let bytes = value.as_bytes();
    if let Some(head) = buffer.get_mut(..bytes.len()) {
        head.copy_from_slice(bytes);
    }
    if let Some(nul) = buffer.get_mut(bytes.len()) {
        *nul = 0;
    }
}

/// Decode a NUL-terminated string attribute: everything up to the first NUL
/// (the kernel pads fixed-size names with NULs).
pub(crate) fn parse_string(value: &[u8]) -> Result<String, DecodeError> {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8(value.get(..end).unwrap_or(value).to_vec())
        .map_err(DecodeError::from)
}

/// Copy raw bytes into an attribute value.
pub(crate) fn emit_bytes(value: &[u8], buffer: &mut [u8]) {
    if let Some(head) = buffer.get_mut(..value.len()) {
        head.copy_from_slice(value);
    }
}
