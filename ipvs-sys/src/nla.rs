//! Small helpers shared by the attribute decoders and encoders.

use netlink_packet_core::{
    DecodeError, Emitable, ErrorContext, Nla, NlaBuffer,
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
    // Sized once: a real server's attributes carry two stats blocks
    // inline, and growing the vector would move them again and again.
    let mut parsed = Vec::with_capacity(count(buf));
    for_each(buf, what, |nla| {
        parsed.push(parse(nla)?);
        Ok(())
    })?;
    Ok(parsed)
}

/// Visit every attribute of a nested block in order, stopping at the
/// first malformed one, without collecting anything. `what` names the
/// block in the error.
///
/// Each header is read once and the attribute handed over as a buffer of
/// exactly its length, whose accessors then cannot fail: this walk runs
/// some forty times per real server of every dump, and a dump precedes
/// each removal.
pub(crate) fn for_each<F>(
    buf: &[u8],
    what: &str,
    mut visit: F,
) -> Result<(), DecodeError>
where
    F: FnMut(&NlaBuffer<&[u8]>) -> Result<(), DecodeError>,
{
    let mut rest = buf;
    while !rest.is_empty() {
        let attribute = next_attribute(rest).map_err(|detail| {
            DecodeError::from(format!(
                "failed to parse {what} attributes: {detail}"
            ))
        })?;
        visit(&NlaBuffer::new(attribute))
            .with_context(|| format!("failed to parse {what} attributes"))?;
        // The last attribute's padding may be missing: the block ends.
        rest = rest.get(aligned_len(attribute.len())..).unwrap_or_default();
    }
    Ok(())
}

/// The attribute `rest` starts with, exactly its length long, or what is
/// wrong with its header.
fn next_attribute(rest: &[u8]) -> Result<&[u8], String> {
    let Some(&[low, high, _, _]) = rest.get(..NLA_HEADER_LEN) else {
        return Err(format!(
            "{} bytes left, less than an attribute header",
            rest.len()
        ));
    };
    let length = usize::from(u16::from_ne_bytes([low, high]));
    if length < NLA_HEADER_LEN {
        return Err(format!(
            "an attribute of length {length}, below its header's \
             {NLA_HEADER_LEN} bytes"
        ));
    }
    rest.get(..length).ok_or_else(|| {
        format!(
            "an attribute of length {length} in the {} bytes left",
            rest.len()
        )
    })
}

/// How many attributes a block holds, by their headers alone. A malformed
/// header ends the count; the decode that follows reports it.
fn count(buf: &[u8]) -> usize {
    let mut attributes = 0;
    let mut at = 0;
    while let Some(&[low, high]) = buf.get(at..at + 2) {
        let length = u16::from_ne_bytes([low, high]);
        if usize::from(length) < NLA_HEADER_LEN {
            break;
        }
        attributes += 1;
        at += aligned_len(usize::from(length));
    }
    attributes
}

/// An attribute's header: length and type, two bytes each.
const NLA_HEADER_LEN: usize = 4;

/// Attributes start on 4-byte boundaries.
fn aligned_len(length: usize) -> usize {
    (length + 3) & !3
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two attributes: kind 1 with a u32, then kind 2 with one byte and
    /// no padding after it (the block's last attribute may end unpadded).
    const BLOCK: [u8; 13] = [8, 0, 1, 0, 7, 0, 0, 0, 5, 0, 2, 0, 9];

    fn kinds(buf: &[u8]) -> Result<Vec<(u16, Vec<u8>)>, DecodeError> {
        parse_all(buf, "test", |nla| Ok((nla.kind(), nla.value().to_vec())))
    }

    #[test]
    fn every_attribute_is_visited_the_last_one_unpadded() {
        let seen = kinds(&BLOCK).expect("a well-formed block");
        assert_eq!(seen, vec![(1, vec![7, 0, 0, 0]), (2, vec![9])]);
        assert_eq!(count(&BLOCK), seen.len());
    }

    #[test]
    fn a_malformed_header_is_an_error_naming_the_block() {
        let cases: [(&str, &[u8], &str); 3] = [
            ("cut short", &BLOCK[..10], "less than an attribute header"),
            ("below its header", &[2, 0, 1, 0], "below its header"),
            ("past the block", &BLOCK[..12], "in the 4 bytes left"),
        ];
        for (name, buf, detail) in cases {
            let err = kinds(buf).expect_err(name).to_string();
            assert!(err.contains("failed to parse test attributes"), "{err}");
            assert!(err.contains(detail), "{name}: {err}");
        }
    }
}
