//! The state-file source: see issue 2.
