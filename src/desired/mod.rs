//! Desired kernel state. See issue 2.
