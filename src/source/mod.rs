//! Sources of API objects. Each yields kube-runtime watcher events per
//! kind; the store turns them, relists included, into (previous, current)
//! pairs for the trackers.

pub mod file;
pub mod kube;
pub mod store;
