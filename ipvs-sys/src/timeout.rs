//! Connection timeouts (`ipvsadm --set tcp tcpfin udp`).

use std::fmt;

/// Timeouts in seconds. In a request, `None` (or 0) leaves that timeout
/// unchanged, as in the kernel; replies fill every field the kernel knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Timeouts {
    /// TCP timeout.
    pub tcp: Option<u32>,
    /// TCP timeout after a FIN.
    pub tcp_fin: Option<u32>,
    /// UDP timeout.
    pub udp: Option<u32>,
}

impl fmt::Display for Timeouts {
    /// `tcp 900 tcpfin 120 udp 300`, as `ipvsadm -L --timeout` lists them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: Option<u32>| v.map_or("-".to_owned(), |v| v.to_string());
        write!(
            f,
            "tcp {} tcpfin {} udp {}",
            show(self.tcp),
            show(self.tcp_fin),
            show(self.udp)
        )
    }
}
