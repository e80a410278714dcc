//! Bounded-frequency sync runner. See issue 2.
