//! Metric names. They are kube-proxy's, letter for letter, so dashboards
//! and alerts written for kube-proxy keep working.

pub const ENDPOINT_CHANGES_TOTAL: &str =
    "kubeproxy_sync_proxy_rules_endpoint_changes_total";
pub const ENDPOINT_CHANGES_PENDING: &str =
    "kubeproxy_sync_proxy_rules_endpoint_changes_pending";
pub const SERVICE_CHANGES_TOTAL: &str =
    "kubeproxy_sync_proxy_rules_service_changes_total";
pub const SERVICE_CHANGES_PENDING: &str =
    "kubeproxy_sync_proxy_rules_service_changes_pending";
/// Ours: objects from the API or the state file that could not be used.
/// Labelled by `kind` (Service, EndpointSlice, Node) and `reason`.
pub const INVALID_OBJECTS_TOTAL: &str = "kube_ipvs_proxy_invalid_objects_total";
/// Failed `iptables-restore` runs, labelled by `ip_family` (IPv4, IPv6).
pub const IPTABLES_RESTORE_FAILURES_TOTAL: &str =
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
