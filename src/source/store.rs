//! Object store that swaps on relist: see issue 2.
