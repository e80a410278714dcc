//! Tracking of our own Node: see issue 2.
