//! ServiceChangeTracker: see issue 2.
