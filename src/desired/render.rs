//! The human-readable form of a plan, laid out like `ipvsadm -Ln`,
//! `ip addr` and `ipset list` so that it reads against what the kernel
//! shows after a sync.

use std::fmt::{self, Write};

use super::Plan;

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "IPVS virtual servers ({}):", self.virtual_servers.len())?;
        writeln!(
            f,
            "  {:<5} {:<28} {:<10} Service",
            "Prot", "LocalAddress:Port", "Scheduler"
        )?;
        for vs in &self.virtual_servers {
            let mut local = String::new();
            write_socket(&mut local, vs.address, vs.port)?;
            let mut sched = vs.scheduling.to_string();
            if vs.persistent {
                write!(sched, " persistent {}", vs.timeout)?;
            }
            writeln!(
                f,
                "  {:<5} {:<28} {:<10} {}",
                vs.protocol.as_str(),
                local,
                sched,
                vs.service
            )?;
            if vs.real_servers.is_empty() {
                writeln!(f, "    (no endpoints)")?;
            }
            for rs in &vs.real_servers {
                let mut remote = String::new();
                write_socket(&mut remote, rs.address, rs.port)?;
                writeln!(f, "    -> {:<28} Masq weight {}", remote, rs.weight)?;
            }
        }

        writeln!(f)?;
        writeln!(f, "kube-ipvs0 addresses ({}):", self.bound_addresses.len())?;
        for addr in &self.bound_addresses {
            let prefix = if addr.is_ipv6() { 128 } else { 32 };
            writeln!(f, "  {addr}/{prefix}")?;
        }

        writeln!(f)?;
        let used = self.ipsets.values().filter(|e| !e.is_empty()).count();
        writeln!(
            f,
            "ipsets ({} with entries, {} in all):",
            used,
            self.ipsets.len()
        )?;
        for (name, entries) in &self.ipsets {
            if entries.is_empty() {
                continue;
            }
            writeln!(f, "  {name} ({})", entries.len())?;
            for e in entries {
                writeln!(f, "    {e}")?;
            }
        }
        let empty: Vec<&str> = self
            .ipsets
            .iter()
            .filter(|(_, e)| e.is_empty())
            .map(|(n, _)| n.as_str())
            .collect();
        if !empty.is_empty() {
            writeln!(f, "  empty: {}", empty.join(", "))?;
        }
        Ok(())
    }
}

fn write_socket(
    out: &mut String,
    addr: std::net::IpAddr,
    port: u16,
) -> fmt::Result {
    write!(out, "{}", std::net::SocketAddr::new(addr, port))
}

impl super::Plan {
    /// One line per virtual server, `TCP 198.18.0.10:80 -> a:p,b:p` (with
    /// the scheduler and flags when not upstream's `rr`, and `persistent
    /// N` when sticky): compact enough to compare whole plans in tests and
    /// logs.
    #[cfg(test)]
    pub fn virtual_server_lines(&self) -> Vec<String> {
        self.virtual_servers
            .iter()
            .map(|vs| {
                let rs: Vec<String> = vs
                    .real_servers
                    .iter()
                    .map(|r| {
                        std::net::SocketAddr::new(r.address, r.port).to_string()
                    })
                    .collect();
                let persist = if vs.persistent {
                    format!(" persistent {}", vs.timeout)
                } else {
                    String::new()
                };
                // Upstream's default is left out, as the lines are short.
                let scheduling = match vs.scheduling
                    == crate::model::Scheduling::default()
                {
                    true => String::new(),
                    false => format!(" {}", vs.scheduling),
                };
                format!(
                    "{} {}{}{} -> {}",
                    vs.protocol,
                    std::net::SocketAddr::new(vs.address, vs.port),
                    scheduling,
                    persist,
                    rs.join(",")
                )
            })
            .collect()
    }
}
