//! Endpoint selection (topology, traffic policies). See issue 2.
