//! The EndpointSlice controller's reconciler for the state file: issue 8.
