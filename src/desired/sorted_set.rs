//! A set kept as a sorted `Vec`: what one service port contributes holds
//! one to a few addresses and set entries, and a `BTreeSet` allocates a
//! node for eleven on the first insert, which at 10,000 services is most
//! of the desired state's memory.

use std::slice;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SortedSet<T>(Vec<T>);

impl<T> Default for SortedSet<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: Ord> SortedSet<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value` unless it is there; true when it was added.
    pub fn insert(&mut self, value: T) -> bool {
        match self.0.binary_search(&value) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, value);
                true
            }
        }
    }

    pub fn contains(&self, value: &T) -> bool {
        self.0.binary_search(value).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// In order.
    pub fn iter(&self) -> slice::Iter<'_, T> {
        self.0.iter()
    }

    /// Gives back the room left by growing: the set is done.
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
}

impl<T: Ord> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut values: Vec<T> = iter.into_iter().collect();
        values.sort();
        values.dedup();
        Self(values)
    }
}

impl<'a, T> IntoIterator for &'a SortedSet<T> {
    type Item = &'a T;
    type IntoIter = slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_its_values_sorted_and_once() {
        let mut set = SortedSet::new();
        assert!(set.insert(3));
        assert!(set.insert(1));
        assert!(!set.insert(3));
        assert!(set.insert(2));
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert!(set.contains(&2) && !set.contains(&4));
        assert_eq!(set, [2, 3, 1, 3].into_iter().collect());
    }
}
