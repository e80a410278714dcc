//! IPVS's older socket-option interface, where it is cheaper than
//! generic netlink: one read, the real servers of one IPv4 service, in
//! one blocking system call; and the writes to IPv4 virtual and real
//! servers, one `setsockopt` each (write.rs).
//!
//! Generic netlink lists a service's real servers as a dump: a request,
//! a message with a dozen attributes and two stats blocks per real
//! server, then a second pass of the kernel's dump callback for the end
//! marker, each hop through the socket's queue. A caller that needs the
//! connection counts of one service right now (graceful termination,
//! before it deletes a real server) pays all of that per service. The
//! `IP_VS_SO_GET_DESTS` socket option answers the same question with one
//! `getsockopt` that fills an array of fixed-size records; it is as old
//! as IPVS and still served by every kernel that has it.
//!
//! Its limits are the interface's: IPv4 services only, and a real server
//! of the other family in an IPv4 service is not listed (the kernel skips
//! it). It needs `CAP_NET_ADMIN`, as generic netlink does.

use std::{
    io,
    mem::{align_of, offset_of, size_of},
    net::{IpAddr, Ipv4Addr},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{Mutex, PoisonError},
};

mod write;

use write::DestUser;

use crate::{
    dest::{ConnCounts, Destination, ForwardMethod},
    error::{Error, Operation},
    service::ServiceKey,
    stats::Stats,
};

/// `IP_VS_BASE_CTL` (64 + 1024 + 64) + 4, from `linux/ip_vs.h`.
const IP_VS_SO_GET_DESTS: libc::c_int = 1156;
/// The forwarding method's bits in a real server's connection flags.
const IP_VS_CONN_F_FWD_MASK: u32 = 0x0007;
/// Room for this many real servers in a first read; one that fills it is
/// read again with twice the room, until one does not.
const FIRST_ROOM: usize = 64;
/// No kernel writes this in a record's flags; a record that still has it
/// after the call was not filled.
const UNFILLED: u32 = u32::MAX;

/// `struct ip_vs_stats_user`: the legacy counters.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct StatsUser {
    conns: u32,
    inpkts: u32,
    outpkts: u32,
    inbytes: u64,
    outbytes: u64,
    cps: u32,
    inpps: u32,
    outpps: u32,
    inbps: u32,
    outbps: u32,
}

/// `struct ip_vs_dest_entry`: the fields a write sets, then the counts.
/// `DestUser` ends on its alignment, so this is the C layout.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct DestEntry {
    dest: DestUser,
    activeconns: u32,
    inactconns: u32,
    persistconns: u32,
    stats: StatsUser,
}

/// `struct ip_vs_get_dests` without its flexible array: the kernel takes
/// the header, then `num_dests` entries right after it (at the entries'
/// alignment, which the header's size already is).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct GetDests {
    protocol: u16,
    addr: u32,
    port: u16,
    fwmark: u32,
    num_dests: u32,
}

/// Where the entries start: the C struct's flexible array is aligned as
/// its element, so the header is padded up to that.
const ENTRIES_AT: usize =
    size_of::<GetDests>().next_multiple_of(align_of::<DestEntry>());

// The uapi layout on x86-64, which the guest's kernel test reads
// through: the kernel refuses a length that is not exactly the header
// plus whole entries.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(
    size_of::<StatsUser>() == 56
        && size_of::<DestEntry>() == 96
        && ENTRIES_AT == 24
);

/// A raw IPv4 socket to ask IPVS over (`socket(AF_INET, SOCK_RAW,
/// IPPROTO_RAW)`, which is what the socket option is registered on). It
/// sends nothing.
#[derive(Debug)]
pub struct SockoptSocket {
    fd: OwnedFd,
    /// The reads' buffer, kept and grown: allocating, zeroing and filling
    /// a new one was most of a read's user time. u64 words, so aligned
    /// for both the header and the entries.
    buffer: Mutex<Vec<u64>>,
}

impl SockoptSocket {
    /// Opens the socket; needs `CAP_NET_RAW` (a raw socket) as well as the
    /// `CAP_NET_ADMIN` each read needs.
    pub fn open() -> Result<Self, Error> {
        // SAFETY: socket(2) takes no pointers; a non-negative result is a
        // new descriptor that nothing else owns.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_RAW,
            )
        };
        if fd < 0 {
            return Err(Error::Socket(io::Error::last_os_error()));
        }
        // SAFETY: fd was just returned by socket(2) and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self {
            fd,
            buffer: Mutex::default(),
        })
    }

    /// The real servers of an IPv4 service, with their connection counts
    /// and counters (the 32-bit ones; `stats64` stays `None`). A service
    /// that does not exist has none, as its generic netlink dump does.
    /// An IPv6 service, an IPv6 fwmark and fwmark 0 are refused with
    /// [`Error::InvalidRequest`] before anything is asked.
    pub fn dests(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<Destination>, Error> {
        let header = header(service)?;
        let mut room = FIRST_ROOM;
        loop {
            let dests = self.read(service, header, room)?;
            if dests.len() < room {
                return Ok(dests);
            }
            // Full: there may be more than there was room for.
            room = room
                .checked_mul(2)
                .filter(|&r| u32::try_from(r).is_ok())
                .ok_or_else(|| {
                    invalid(
                        Operation::ListDests,
                        service.to_string(),
                        "too many real servers",
                    )
                })?;
        }
    }

    /// One read with room for `room` entries: the real servers of the
    /// filled ones, in the kernel's order.
    fn read(
        &self,
        service: &ServiceKey,
        header: GetDests,
        room: usize,
    ) -> Result<Vec<Destination>, Error> {
        let len = ENTRIES_AT + room * size_of::<DestEntry>();
        let mut buf =
            self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let words = len.div_ceil(size_of::<u64>());
        if buf.len() < words {
            buf.resize(words, 0);
        }
        let base = buf.as_mut_ptr().cast::<u8>();
        let entry_at = |i: usize| ENTRIES_AT + i * size_of::<DestEntry>();
        let header = GetDests {
            num_dests: room as u32,
            ..header
        };
        // Only each entry's marker is written: the rest of the buffer is
        // initialised, by the zeroes it was made with or by earlier reads,
        // and an entry is read only when its marker says it was filled.
        let marker_at = offset_of!(DestEntry, dest.conn_flags);
        // SAFETY: buf holds at least len bytes, 8-aligned; the header is
        // at 0, entry i at entry_at(i) and its marker marker_at further,
        // all within len and aligned for their types (ENTRIES_AT and the
        // entry size are multiples of the entry's alignment).
        unsafe {
            base.cast::<GetDests>().write(header);
            for i in 0..room {
                base.add(entry_at(i) + marker_at)
                    .cast::<u32>()
                    .write(UNFILLED);
            }
        }
        self.getsockopt(service, base.cast(), len)?;
        let mut dests = Vec::new();
        for i in 0..room {
            // SAFETY: as above; every field is an integer, so whatever
            // bytes the kernel left there are a valid DestEntry.
            let entry =
                unsafe { base.add(entry_at(i)).cast::<DestEntry>().read() };
            // The kernel fills entries from the first on; the rest keep
            // the marker.
            if entry.dest.conn_flags == UNFILLED {
                break;
            }
            dests.push(destination(&entry));
        }
        Ok(dests)
    }

    fn getsockopt(
        &self,
        service: &ServiceKey,
        buf: *mut libc::c_void,
        len: usize,
    ) -> Result<(), Error> {
        let mut optlen = len as libc::socklen_t;
        // SAFETY: buf points to len writable bytes laid out as the
        // kernel's struct ip_vs_get_dests with its entries; optlen says
        // so. The kernel writes only within them.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_IP,
                IP_VS_SO_GET_DESTS,
                buf,
                &mut optlen,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            // No such service: none, as the dump answers.
            Some(libc::ESRCH) => Ok(()),
            Some(errno) => Err(Error::Sockopt {
                operation: Operation::ListDests,
                object: service.to_string(),
                errno,
            }),
            None => Err(Error::Socket(err)),
        }
    }
}

/// The read's header: the same key fields as a write's record.
fn header(service: &ServiceKey) -> Result<GetDests, Error> {
    let key = write::key_record(service, Operation::ListDests)?;
    Ok(GetDests {
        protocol: key.protocol,
        addr: key.addr,
        port: key.port,
        fwmark: key.fwmark,
        num_dests: 0,
    })
}

fn invalid(
    operation: Operation,
    object: String,
    reason: impl Into<String>,
) -> Error {
    Error::InvalidRequest {
        operation,
        object,
        reason: reason.into(),
    }
}

fn destination(record: &DestEntry) -> Destination {
    let (entry, stats) = (record.dest, record.stats);
    Destination {
        address: IpAddr::V4(Ipv4Addr::from(entry.addr.to_ne_bytes())),
        port: u16::from_be(entry.port),
        fwd_method: ForwardMethod::from(
            entry.conn_flags & IP_VS_CONN_F_FWD_MASK,
        ),
        // Never negative: the kernel refuses such weights when set.
        weight: u32::try_from(entry.weight).unwrap_or(0),
        upper_threshold: entry.u_threshold,
        lower_threshold: entry.l_threshold,
        tunnel: None,
        conns: Some(ConnCounts {
            active: record.activeconns,
            inactive: record.inactconns,
            persistent: record.persistconns,
        }),
        stats: Some(Stats {
            conns: stats.conns.into(),
            in_packets: stats.inpkts.into(),
            out_packets: stats.outpkts.into(),
            in_bytes: stats.inbytes,
            out_bytes: stats.outbytes,
            cps: stats.cps.into(),
            in_pps: stats.inpps.into(),
            out_pps: stats.outpps.into(),
            in_bps: stats.inbps.into(),
            out_bps: stats.outbps.into(),
        }),
        stats64: None,
    }
}
