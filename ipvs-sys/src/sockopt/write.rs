//! Writes over the same socket options: one `setsockopt` per change to
//! an IPv4 virtual or real server, whose return value is the kernel's
//! answer.
//!
//! A generic netlink write is a message built and sent, then an
//! acknowledgement received, decoded and routed back to its caller by the
//! connection's task: two system calls and a few task wake-ups around
//! the kernel's own work. A few changes at a time (a sync under churn)
//! pay that overhead more than the work; `IP_VS_SO_SET_*` takes a fixed
//! record and does the same work inside the one call. Both paths end in
//! the same kernel functions (`ip_vs_add_dest` and the like, under the
//! same mutex), so what they leave in the kernel is the same; the guest's
//! kernel test compares the two field by field.
//!
//! What the records cannot say is refused before anything is asked:
//! IPv6 (services and real servers), persistence engines, a real
//! server's tunnel settings, scheduler names longer than the kernel's 15
//! bytes.

use std::{io, mem::size_of, net::IpAddr, os::fd::AsRawFd};

use super::{invalid, SockoptSocket, IP_VS_CONN_F_FWD_MASK};
use crate::{
    address::AddressFamily,
    dest::Destination,
    error::{Error, Operation},
    service::{Service, ServiceKey},
};

/// `IP_VS_BASE_CTL` + 2, + 3, + 4, + 7, + 8, + 9, from `linux/ip_vs.h`.
const IP_VS_SO_SET_ADD: libc::c_int = 1154;
const IP_VS_SO_SET_EDIT: libc::c_int = 1155;
const IP_VS_SO_SET_DEL: libc::c_int = 1156;
const IP_VS_SO_SET_ADDDEST: libc::c_int = 1159;
const IP_VS_SO_SET_DELDEST: libc::c_int = 1160;
const IP_VS_SO_SET_EDITDEST: libc::c_int = 1161;
/// `IP_VS_SCHEDNAME_MAXLEN`, its terminating NUL included.
const SCHEDNAME_LEN: usize = 16;

/// `struct ip_vs_service_user`; its key fields also head a read.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct ServiceUser {
    pub(super) protocol: u16,
    pub(super) addr: u32,
    pub(super) port: u16,
    pub(super) fwmark: u32,
    sched_name: [u8; SCHEDNAME_LEN],
    flags: u32,
    timeout: u32,
    netmask: u32,
}

/// `struct ip_vs_dest_user`, which also begins the kernel's
/// `struct ip_vs_dest_entry` that a read fills.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct DestUser {
    pub(super) addr: u32,
    pub(super) port: u16,
    pub(super) conn_flags: u32,
    pub(super) weight: i32,
    pub(super) u_threshold: u32,
    pub(super) l_threshold: u32,
}

/// The kernel's `struct ip_vs_svcdest_user`: the service, then the real
/// server, which every real-server command takes.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ServiceDestUser {
    service: ServiceUser,
    dest: DestUser,
}

// The kernel refuses any length but the record's exact size, and the
// guest's kernel test is what holds the layout to it; these are the
// uapi's sizes on every Linux ABI (no field wider than 4 bytes).
const _: () = assert!(
    size_of::<ServiceUser>() == 44
        && size_of::<DestUser>() == 24
        && size_of::<ServiceDestUser>() == 68
);

impl SockoptSocket {
    /// Adds an IPv4 virtual server (`ipvsadm -A`); EEXIST if it exists.
    pub fn add_service(&self, service: &Service) -> Result<(), Error> {
        let record = service_record(service, Operation::AddService)?;
        self.set(IP_VS_SO_SET_ADD, &record, Operation::AddService, || {
            service.key.to_string()
        })
    }

    /// Replaces an IPv4 virtual server's scheduler, flags and persistence
    /// (`ipvsadm -E`); ESRCH if it is missing.
    pub fn set_service(&self, service: &Service) -> Result<(), Error> {
        let record = service_record(service, Operation::SetService)?;
        self.set(IP_VS_SO_SET_EDIT, &record, Operation::SetService, || {
            service.key.to_string()
        })
    }

    /// Deletes an IPv4 virtual server and its real servers
    /// (`ipvsadm -D`); ESRCH if it is missing.
    pub fn del_service(&self, key: &ServiceKey) -> Result<(), Error> {
        let record = key_record(key, Operation::DelService)?;
        self.set(IP_VS_SO_SET_DEL, &record, Operation::DelService, || {
            key.to_string()
        })
    }

    /// Adds an IPv4 real server to an IPv4 virtual server
    /// (`ipvsadm -a`); EEXIST if it is there, ESRCH if the virtual server
    /// is missing.
    pub fn add_dest(
        &self,
        key: &ServiceKey,
        dest: &Destination,
    ) -> Result<(), Error> {
        self.dest_command(IP_VS_SO_SET_ADDDEST, Operation::AddDest, key, dest)
    }

    /// Replaces a real server's weight, method and thresholds
    /// (`ipvsadm -e`); ENOENT if it is missing.
    pub fn set_dest(
        &self,
        key: &ServiceKey,
        dest: &Destination,
    ) -> Result<(), Error> {
        self.dest_command(IP_VS_SO_SET_EDITDEST, Operation::SetDest, key, dest)
    }

    /// Deletes a real server (`ipvsadm -d`); only its address and port
    /// matter. ENOENT if it is missing.
    pub fn del_dest(
        &self,
        key: &ServiceKey,
        dest: &Destination,
    ) -> Result<(), Error> {
        self.dest_command(IP_VS_SO_SET_DELDEST, Operation::DelDest, key, dest)
    }

    fn dest_command(
        &self,
        command: libc::c_int,
        operation: Operation,
        key: &ServiceKey,
        dest: &Destination,
    ) -> Result<(), Error> {
        let object = || format!("{dest} in {key}");
        let IpAddr::V4(addr) = dest.address else {
            return Err(refused(operation, object(), "IPv6 real server"));
        };
        if dest.tunnel.is_some() {
            return Err(refused(operation, object(), "tunnel settings"));
        }
        let record = ServiceDestUser {
            service: key_record(key, operation)?,
            dest: DestUser {
                addr: u32::from_ne_bytes(addr.octets()),
                port: dest.port.to_be(),
                // All that generic netlink passes on of the flags.
                conn_flags: u32::from(dest.fwd_method) & IP_VS_CONN_F_FWD_MASK,
                // The same bits generic netlink sends: the kernel refuses
                // a weight above i32::MAX (negative here) with ERANGE.
                weight: i32::from_ne_bytes(dest.weight.to_ne_bytes()),
                u_threshold: dest.upper_threshold,
                l_threshold: dest.lower_threshold,
            },
        };
        self.set(command, &record, operation, object)
    }

    /// One `setsockopt` with `record` as its value. `object` names what
    /// an error is about; it is only built for one.
    fn set<T: Copy>(
        &self,
        command: libc::c_int,
        record: &T,
        operation: Operation,
        object: impl FnOnce() -> String,
    ) -> Result<(), Error> {
        // SAFETY: record is a live, initialised repr(C) value of
        // size_of::<T>() bytes, the length passed; the kernel only reads
        // it.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_IP,
                command,
                std::ptr::from_ref(record).cast(),
                size_of::<T>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(errno) => Err(Error::Sockopt {
                operation,
                object: object(),
                errno,
            }),
            None => Err(Error::Socket(err)),
        }
    }
}

/// The record of a command about the virtual server as a whole: its key
/// and settings.
fn service_record(
    service: &Service,
    operation: Operation,
) -> Result<ServiceUser, Error> {
    let object = || service.key.to_string();
    if service.persistence_engine.is_some() {
        return Err(refused(operation, object(), "a persistence engine"));
    }
    let name = service.scheduler.as_bytes();
    if name.len() >= SCHEDNAME_LEN || name.contains(&0) {
        return Err(refused(operation, object(), "this scheduler name"));
    }
    let mut record = key_record(&service.key, operation)?;
    record.sched_name[..name.len()].copy_from_slice(name);
    record.flags = service.flags.bits();
    record.timeout = service.timeout;
    // Generic netlink sends this mask in network order too.
    record.netmask = service.raw_netmask().to_be();
    Ok(record)
}

/// The record's key fields: protocol, address and port, or the mark.
pub(super) fn key_record(
    key: &ServiceKey,
    operation: Operation,
) -> Result<ServiceUser, Error> {
    match *key {
        ServiceKey::Inet {
            protocol,
            address: IpAddr::V4(addr),
            port,
        } => Ok(ServiceUser {
            protocol: u16::from(protocol),
            addr: u32::from_ne_bytes(addr.octets()),
            port: port.to_be(),
            ..ServiceUser::default()
        }),
        // The kernel checks the protocol even for marks, and stores TCP
        // for a mark that comes by generic netlink: so here too.
        ServiceKey::Fwmark {
            family: AddressFamily::Inet,
            mark,
        } if mark != 0 => Ok(ServiceUser {
            protocol: u16::from(crate::address::Protocol::Tcp),
            fwmark: mark,
            ..ServiceUser::default()
        }),
        _ => Err(invalid(
            operation,
            key.to_string(),
            "the socket options serve IPv4 services only",
        )),
    }
}

fn refused(operation: Operation, object: String, what: &str) -> Error {
    invalid(
        operation,
        object,
        format!("the socket options cannot carry {what}"),
    )
}
