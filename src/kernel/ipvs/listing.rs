//! The whole IPVS table as `ipvsadm -Ln` lists it, forwarding method,
//! netmask and connection counts included: what `list` prints from the
//! proxy's image, which has no ipvsadm. A read for people, apart from the
//! proxy's own reads ([`super::Ipvs::dump`]), which keep only what a sync
//! compares.

use std::{cmp::Ordering, fmt::Write as _, net::IpAddr};

use futures::StreamExt;
use ipvs_sys::{
    AddressFamily, Destination, Handle, Protocol as IpvsProtocol, Service,
    ServiceFlags, ServiceKey,
};

use super::{
    real::{from_key, kernel_error, open},
    VirtualServerKey,
};
use crate::{kernel::KernelError, model::SchedulerFlags};

/// What errors of the listing name.
const OBJECT: &str = "IPVS table";

/// Every virtual server with its real servers, in ipvsadm's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// IPVS's version, `1.2.1`.
    pub version: String,
    /// The size of the connection table.
    pub table_size: u32,
    pub services: Vec<ListedService>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ListedService {
    pub service: Service,
    pub dests: Vec<Destination>,
}

impl ListedService {
    /// The proxy's key of this virtual server; `None` for those it never
    /// programs (firewall marks, other protocols).
    pub fn key(&self) -> Option<VirtualServerKey> {
        from_key(&self.service.key)
    }

    /// The virtual server's first column, as ipvsadm writes it:
    /// `TCP  198.18.0.10:80`, `UDP  [2001:db8::a]:53`, `FWM  7`.
    pub fn name(&self) -> String {
        match self.service.key {
            ServiceKey::Inet {
                protocol,
                address,
                port,
            } => format!(
                "{}  {}",
                protocol_name(protocol),
                socket(address, port)
            ),
            ServiceKey::Fwmark { family, mark } => match family {
                AddressFamily::Inet6 => format!("FWM  {mark} IPv6"),
                _ => format!("FWM  {mark}"),
            },
        }
    }

    /// The scheduler's flags under the names ipvsadm gives them for this
    /// scheduler (`mh-port`; `flag-1` for a scheduler it does not know).
    pub fn scheduler_flags(&self) -> Vec<&'static str> {
        SchedulerFlags::from_kernel(self.service.flags.bits())
            .names(&self.service.scheduler)
    }

    /// ClientIP affinity's timeout, when the virtual server has it.
    pub fn persistence(&self) -> Option<u32> {
        self.service
            .flags
            .contains(ServiceFlags::PERSISTENT)
            .then_some(self.service.timeout)
    }

    /// The rest of the virtual server's line: scheduler, its flags,
    /// persistence and a netmask other than the address's own.
    fn scheduling(&self) -> String {
        let service = &self.service;
        let mut text = service.scheduler.clone();
        let flags = self.scheduler_flags();
        if !flags.is_empty() {
            let _ = write!(text, " ({})", flags.join(","));
        }
        if let Some(timeout) = self.persistence() {
            let _ = write!(text, " persistent {timeout}");
            match service.family() {
                AddressFamily::Inet6 if service.netmask != 128 => {
                    let _ = write!(text, " mask {}", service.netmask);
                }
                AddressFamily::Inet if service.netmask != 32 => {
                    let mask = u32::MAX
                        .checked_shl(32 - u32::from(service.netmask.min(32)))
                        .unwrap_or(0);
                    let _ = write!(
                        text,
                        " mask {}",
                        std::net::Ipv4Addr::from(mask)
                    );
                }
                _ => {}
            }
            if service.flags.contains(ServiceFlags::ONE_PACKET) {
                text.push_str(" ops");
            }
        }
        text
    }
}

impl Listing {
    /// `ipvsadm -Ln`'s text, each virtual server's line followed by what
    /// `note` says of it (`  # default/web:http clusterIP`), if anything.
    pub fn text(
        &self,
        note: impl Fn(&ListedService) -> Option<String>,
    ) -> String {
        let mut out = format!(
            "IP Virtual Server version {} (size={})\n\
             Prot LocalAddress:Port Scheduler Flags\n  \
             -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n",
            self.version, self.table_size
        );
        for listed in &self.services {
            let _ = write!(out, "{} {}", listed.name(), listed.scheduling());
            if let Some(note) = note(listed) {
                let _ = write!(out, "  # {note}");
            }
            out.push('\n');
            for dest in &listed.dests {
                let conns = dest.conns.unwrap_or_default();
                // Padded as ipvsadm pads them, the last column too.
                let _ = writeln!(
                    out,
                    "  -> {:<28} {:<7} {:<6} {:<10} {:<10}",
                    socket(dest.address, dest.port),
                    dest.fwd_method.to_string(),
                    dest.weight,
                    conns.active,
                    conns.inactive
                );
            }
        }
        out
    }
}

/// Reads the whole table, on a connection of its own on the current
/// runtime: the info, every service, each one's real servers.
pub async fn read() -> Result<Listing, KernelError> {
    read_over(&open()?).await
}

async fn read_over(handle: &Handle) -> Result<Listing, KernelError> {
    let info = handle
        .info()
        .execute()
        .await
        .map_err(|e| kernel_error(OBJECT, &e))?;
    let mut services = Vec::new();
    let mut replies = handle.service().list().execute();
    while let Some(reply) = replies.next().await {
        services.push(reply.map_err(|e| kernel_error(OBJECT, &e))?);
    }
    services.sort_by(ipvsadm_service_order);
    let mut listed = Vec::with_capacity(services.len());
    for service in services {
        let mut dests = Vec::new();
        let mut replies = handle.dest(service.key).list().execute();
        while let Some(reply) = replies.next().await {
            let object = format!("real servers of {}", service.key);
            dests.push(reply.map_err(|e| kernel_error(object, &e))?);
        }
        dests.sort_by(|a, b| {
            (numeric(a.address), a.port).cmp(&(numeric(b.address), b.port))
        });
        listed.push(ListedService { service, dests });
    }
    Ok(Listing {
        version: info.version.to_string(),
        table_size: info.conn_table_size,
        services: listed,
    })
}

/// ipvsadm's order: address services before firewall marks, IPv4 before
/// IPv6, TCP before UDP before SCTP (by protocol number), then address and
/// port. (ipvsadm compares addresses by a difference that wraps for
/// addresses 2^31 apart; this compares them as numbers.)
fn ipvsadm_service_order(a: &Service, b: &Service) -> Ordering {
    fn rank(service: &Service) -> (u32, u8, u16, u128, u16) {
        let family = match service.family() {
            AddressFamily::Inet6 => 1,
            _ => 0,
        };
        match service.key {
            ServiceKey::Inet {
                protocol,
                address,
                port,
            } => (0, family, protocol_number(protocol), numeric(address), port),
            ServiceKey::Fwmark { mark, .. } => (mark, family, 0, 0, 0),
        }
    }
    rank(a).cmp(&rank(b))
}

fn protocol_number(protocol: IpvsProtocol) -> u16 {
    match protocol {
        IpvsProtocol::Tcp => 6,
        IpvsProtocol::Udp => 17,
        IpvsProtocol::Sctp => 132,
        IpvsProtocol::Other(n) => n,
        _ => u16::MAX,
    }
}

fn protocol_name(protocol: IpvsProtocol) -> String {
    match protocol {
        IpvsProtocol::Tcp => "TCP".into(),
        IpvsProtocol::Udp => "UDP".into(),
        IpvsProtocol::Sctp => "SCTP".into(),
        IpvsProtocol::Other(n) => n.to_string(),
        _ => "?".into(),
    }
}

fn numeric(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// `198.18.0.10:80`, `[2001:db8::a]:53`.
fn socket(address: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(address, port).to_string()
}

#[cfg(test)]
mod tests {
    use ipvs_sys::{ConnCounts, ForwardMethod};

    use super::*;

    fn tcp(address: &str, port: u16) -> Service {
        Service::new(ServiceKey::tcp(address.parse().unwrap(), port))
            .with_scheduler("rr")
    }

    fn dest(address: &str, port: u16, weight: u32, active: u32) -> Destination {
        let mut dest = Destination::new(address.parse().unwrap(), port)
            .with_weight(weight)
            .with_fwd_method(ForwardMethod::Masquerade);
        dest.conns = Some(ConnCounts {
            active,
            inactive: 1,
            persistent: 0,
        });
        dest
    }

    #[test]
    fn the_text_is_ipvsadms_with_each_note_after_its_line() {
        let mh = tcp("198.18.0.20", 443)
            .with_scheduler("mh")
            .with_flags(ServiceFlags::MH_PORT | ServiceFlags::MH_FALLBACK)
            .persistent(10800);
        let listing = Listing {
            version: "1.2.1".into(),
            table_size: 4096,
            services: vec![
                ListedService {
                    service: tcp("198.18.0.10", 80),
                    dests: vec![dest("198.19.0.2", 8080, 1, 3)],
                },
                ListedService {
                    service: mh,
                    dests: vec![],
                },
            ],
        };
        let text = listing.text(|listed| {
            (listed.service.scheduler == "rr")
                .then(|| "default/web:http".into())
        });
        assert_eq!(
            text,
            "IP Virtual Server version 1.2.1 (size=4096)\n\
             Prot LocalAddress:Port Scheduler Flags\n  \
             -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n\
             TCP  198.18.0.10:80 rr  # default/web:http\n  \
             -> 198.19.0.2:8080              Masq    1      3          1         \n\
             TCP  198.18.0.20:443 mh (mh-fallback,mh-port) persistent 10800\n"
        );
    }

    #[test]
    fn services_come_in_ipvsadms_order() {
        let udp =
            Service::new(ServiceKey::udp("198.18.0.1".parse().unwrap(), 53));
        let v6 =
            Service::new(ServiceKey::tcp("2001:db8::1".parse().unwrap(), 80));
        let mut services = [
            v6.clone(),
            udp.clone(),
            tcp("198.18.0.10", 80),
            tcp("198.18.0.9", 443),
            tcp("198.18.0.9", 80),
        ];
        services.sort_by(ipvsadm_service_order);
        let keys: Vec<String> =
            services.iter().map(|s| s.key.to_string()).collect();
        let expected: Vec<String> = [
            tcp("198.18.0.9", 80),
            tcp("198.18.0.9", 443),
            tcp("198.18.0.10", 80),
            udp,
            v6,
        ]
        .iter()
        .map(|s| s.key.to_string())
        .collect();
        assert_eq!(keys, expected);
    }
}
