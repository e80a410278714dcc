//! Reading structure out of the fuzzer's bytes: choices from small
//! vocabularies of plausible and hostile values, so that the mutations
//! libFuzzer makes land on inputs the decoders care about, rather than
//! on JSON or protobuf syntax.

use arbitrary::Unstructured;

/// The fuzzer's bytes as a source of choices; when they run out every
/// choice is the first (or zero, or empty), so every input means
/// something.
pub(super) struct Input<'a> {
    u: Unstructured<'a>,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self {
            u: Unstructured::new(data),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.u.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        self.u.arbitrary().unwrap_or(0)
    }

    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// `true` about one time in `n`.
    pub fn one_in(&mut self, n: u8) -> bool {
        self.byte().is_multiple_of(n.max(1))
    }

    pub fn u16(&mut self) -> u16 {
        self.u.arbitrary().unwrap_or(0)
    }

    pub fn u32(&mut self) -> u32 {
        self.u.arbitrary().unwrap_or(0)
    }

    pub fn i32(&mut self) -> i32 {
        self.u.arbitrary().unwrap_or(0)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        usize::from(self.u16()) % n
    }

    pub fn pick<T: Clone + Default>(&mut self, choices: &[T]) -> T {
        choices
            .get(self.below(choices.len()))
            .cloned()
            .unwrap_or_default()
    }

    pub fn pick_str(&mut self, choices: &[&str]) -> String {
        choices
            .get(self.below(choices.len()))
            .map(|s| (*s).to_owned())
            .unwrap_or_default()
    }

    /// `None` about one time in four, else `some()`.
    pub fn maybe<T>(&mut self, some: impl FnOnce(&mut Self) -> T) -> Option<T> {
        match self.one_in(4) {
            true => None,
            false => Some(some(self)),
        }
    }

    /// Up to `max` items.
    pub fn list<T>(
        &mut self,
        max: usize,
        mut item: impl FnMut(&mut Self) -> T,
    ) -> Vec<T> {
        let n = self.below(max + 1);
        (0..n).map(|_| item(self)).collect()
    }

    /// A string of up to `max` bytes of the input (lossy UTF-8).
    pub fn text(&mut self, max: usize) -> String {
        let n = self.below(max + 1);
        let bytes = self.u.bytes(n.min(self.u.len())).unwrap_or_default();
        String::from_utf8_lossy(bytes).into_owned()
    }
}
