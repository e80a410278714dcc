//! The API-server source: see issue 2.
