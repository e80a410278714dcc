//! EndpointsChangeTracker and EndpointSliceCache: see issue 2.
