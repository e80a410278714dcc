//! The kernel's text table of IPVS, `/proc/net/ip_vs`: every virtual
//! server with its real servers, in one read.
//!
//! Generic netlink lists real servers one virtual server at a time, so
//! reading back 10,000 services takes 10,000 dumps; a repair does that
//! every `syncPeriod`. The text table has every real-server field the
//! proxy compares (address, port, weight, active and inactive
//! connections) for the whole table in one pass, several times faster
//! than the dumps at 10,000 services (docs/benchmarks.md). What
//! it lacks about a virtual server (the scheduler's flags, the
//! persistence netmask) still comes from netlink's one dump of the
//! services; see `real::dump_with_text`.
//!
//! The kernel writes one record per virtual server, its real servers
//! included, and never splits a record between two reads. A read that
//! restarts after a change may skip or repeat whole records; a virtual
//! server missing from the text is read over netlink instead.

use std::{
    collections::{BTreeMap, HashMap},
    fs::File,
    io::{self, BufRead, BufReader, Seek},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::{Arc, Mutex},
};

use super::{DestKey, DestState, VirtualServerKey};
use crate::{
    kernel::{ErrorKind, KernelError},
    model::Protocol,
};

/// What reads and their errors name.
const OBJECT: &str = "IPVS table (/proc/net/ip_vs)";

/// The table of the network namespace the file was opened in.
#[derive(Debug, Clone)]
pub(super) struct ProcTable {
    file: Arc<Mutex<File>>,
}

impl ProcTable {
    /// Opens the calling thread's namespace's table (that of the
    /// netlink sockets opened beside it, which a thread that has
    /// unshared its namespace does not share with the process); `None`
    /// without IPVS or /proc.
    pub(super) fn open() -> Option<Self> {
        let file = File::open("/proc/thread-self/net/ip_vs").ok()?;
        Some(Self {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Reads and parses the whole table, on a blocking thread: at
    /// 10,000 services it is megabytes of text.
    pub(super) async fn read(&self) -> Result<Listed, KernelError> {
        let file = Arc::clone(&self.file);
        tokio::task::spawn_blocking(move || {
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            // The kernel regenerates the text from the start.
            file.rewind()?;
            parse(BufReader::with_capacity(1 << 16, &*file))
        })
        .await
        .map_err(|e| failed(format!("the read failed: {e}")))?
        .map_err(|e| failed(e.to_string()))
    }
}

fn failed(message: String) -> KernelError {
    KernelError::new(ErrorKind::Transport, OBJECT, message)
}

/// The real servers of each virtual server the text lists whole.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Listed {
    pub dests: HashMap<VirtualServerKey, BTreeMap<DestKey, DestState>>,
    /// Lines that could not be read, each with why. A virtual server
    /// with such a line is left out of `dests`, so that it is read over
    /// netlink rather than taken as missing a real server.
    pub unreadable: Vec<String>,
}

/// One virtual server's record as it is being read; `key` is `None` for
/// one that is not ours to read (fwmark, another protocol), whose real
/// servers are passed over.
struct Record {
    key: Option<VirtualServerKey>,
    dests: BTreeMap<DestKey, DestState>,
    whole: bool,
}

impl Record {
    fn end(self, listed: &mut Listed) {
        if let (Some(key), true) = (self.key, self.whole) {
            // A record repeated by a restarted read: the later is as new.
            listed.dests.insert(key, self.dests);
        }
    }
}

/// Parses the text: a header, then per virtual server a line such as
/// `TCP  C6120001:0050 rr ` (or `UDP  [2001:0db8:…:0001]:0035 rr
/// persistent 10800 00000080`, or `FWM  00000007 rr `) followed by one
/// `  -> C6130001:1F90      Masq    1      0          0` per real
/// server: address and port in hexadecimal, forwarding, weight, active
/// and inactive connections.
pub(crate) fn parse(mut text: impl BufRead) -> io::Result<Listed> {
    let mut listed = Listed::default();
    let mut record: Option<Record> = None;
    let mut line = String::new();
    loop {
        line.clear();
        if text.read_line(&mut line)? == 0 {
            break;
        }
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else {
            continue;
        };
        if first == "->" {
            let Some(current) = record.as_mut() else {
                continue;
            };
            if current.key.is_none() || !current.whole {
                continue;
            }
            match dest(fields) {
                Some((key, state)) => {
                    current.dests.insert(key, state);
                }
                None => {
                    current.whole = false;
                    listed
                        .unreadable
                        .push(format!("a real server: {:?}", line.trim_end()));
                }
            }
            continue;
        }
        if let Some(done) = record.take() {
            done.end(&mut listed);
        }
        if matches!(first, "IP" | "Prot") {
            continue;
        }
        let Some(protocol) = protocol(first) else {
            // fwmark services and protocols the proxy never programs.
            record = Some(Record {
                key: None,
                dests: BTreeMap::new(),
                whole: true,
            });
            continue;
        };
        let key = fields.next().and_then(socket).map(|(address, port)| {
            VirtualServerKey {
                address,
                port,
                protocol,
            }
        });
        if key.is_none() {
            listed
                .unreadable
                .push(format!("a virtual server: {:?}", line.trim_end()));
        }
        record = Some(Record {
            key,
            dests: BTreeMap::new(),
            whole: true,
        });
    }
    if let Some(done) = record {
        done.end(&mut listed);
    }
    Ok(listed)
}

fn protocol(name: &str) -> Option<Protocol> {
    match name {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

/// `C6130001:1F90` or `[2001:0db8:0000:0000:0000:0000:0000:0001]:0050`.
fn socket(text: &str) -> Option<(IpAddr, u16)> {
    let (address, port) = text.rsplit_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let address = match address.strip_prefix('[') {
        Some(v6) => IpAddr::V6(v6.strip_suffix(']')?.parse::<Ipv6Addr>().ok()?),
        None if address.len() == 8 => {
            IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(address, 16).ok()?))
        }
        None => return None,
    };
    Some((address, port))
}

/// The fields of a real server's line after its `->`.
fn dest<'a>(
    mut fields: impl Iterator<Item = &'a str>,
) -> Option<(DestKey, DestState)> {
    let (address, port) = socket(fields.next()?)?;
    let _forwarding = fields.next()?;
    let mut number = || fields.next()?.parse::<u32>().ok();
    let state = DestState {
        weight: number()?,
        active_conns: number()?,
        inactive_conns: number()?,
    };
    Some((DestKey { address, port }, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the 6.1 guest kernel printed for a table programmed by
    /// `ipvsadm` (a fwmark service and an IPv6 one among them).
    const TABLE: &str = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  C612000A:0050 rr 
  -> C6130001:1F90      Masq    1      0          0         
  -> C6130002:1F90      Masq    0      3          12        
FWM  00000007 rr 
  -> C6130009:0000      Masq    1      0          0         
UDP  C6120035:0035 rr persistent 10800 FFFFFFFF
TCP  [2001:0db8:0000:0000:0000:0000:0000:000a]:01BB mh persistent 60 00000080
  -> [2001:0db8:0000:0000:0000:0000:0001:0001]:1F90      Masq    2147483647 0          0         
SCTP  C6120003:2328 wrr 
  -> C6130003:2328      Masq    1      1          0         
";

    fn key(protocol: Protocol, address: &str, port: u16) -> VirtualServerKey {
        VirtualServerKey {
            address: address.parse().unwrap(),
            port,
            protocol,
        }
    }

    fn dest(
        address: &str,
        port: u16,
        weight: u32,
        active: u32,
        inactive: u32,
    ) -> (DestKey, DestState) {
        (
            DestKey {
                address: address.parse().unwrap(),
                port,
            },
            DestState {
                weight,
                active_conns: active,
                inactive_conns: inactive,
            },
        )
    }

    #[test]
    fn every_virtual_server_with_its_real_servers() {
        let listed = parse(TABLE.as_bytes()).unwrap();
        let expected: HashMap<_, BTreeMap<_, _>> = [
            (
                key(Protocol::Tcp, "198.18.0.10", 80),
                [
                    dest("198.19.0.1", 8080, 1, 0, 0),
                    dest("198.19.0.2", 8080, 0, 3, 12),
                ]
                .into(),
            ),
            (key(Protocol::Udp, "198.18.0.53", 53), BTreeMap::new()),
            (
                key(Protocol::Tcp, "2001:db8::a", 443),
                [dest("2001:db8::1:1", 8080, 2147483647, 0, 0)].into(),
            ),
            (
                key(Protocol::Sctp, "198.18.0.3", 9000),
                [dest("198.19.0.3", 9000, 1, 1, 0)].into(),
            ),
        ]
        .into();
        assert_eq!(listed.dests, expected);
        assert!(listed.unreadable.is_empty(), "{:?}", listed.unreadable);
    }

    /// A line that cannot be read leaves its whole virtual server out
    /// (to be read over netlink), and the rest of the table in.
    #[test]
    fn an_unreadable_line_drops_its_virtual_server_alone() {
        let text = TABLE
            .replace(
                "C6130002:1F90      Masq    0",
                "C6130002:1F90      Masq    -1",
            )
            .replace("[2001:0db8:0000:0000:0000:0000:0000:000a]", "[2001:zz]");
        let listed = parse(text.as_bytes()).unwrap();
        let mut keys: Vec<_> = listed.dests.keys().copied().collect();
        keys.sort();
        assert_eq!(
            keys,
            vec![
                key(Protocol::Sctp, "198.18.0.3", 9000),
                key(Protocol::Udp, "198.18.0.53", 53),
            ]
        );
        assert_eq!(listed.unreadable.len(), 2, "{:?}", listed.unreadable);
        assert!(listed.unreadable[0].contains("C6130002:1F90"));
        assert!(listed.unreadable[1].contains("2001:zz"));
    }

    /// A read restarted after a change can list a record twice, or cut
    /// the text short at a record's end; neither is an error.
    #[test]
    fn repeated_records_and_a_short_text_are_read() {
        let repeated = format!(
            "{TABLE}TCP  C612000A:0050 rr \n  -> C6130001:1F90      Masq    5      0          0\n"
        );
        let listed = parse(repeated.as_bytes()).unwrap();
        assert_eq!(
            listed.dests[&key(Protocol::Tcp, "198.18.0.10", 80)],
            [dest("198.19.0.1", 8080, 5, 0, 0)].into()
        );
        assert_eq!(parse(&b""[..]).unwrap(), Listed::default());
    }

    #[test]
    fn addresses_are_read_in_the_kernels_spelling() {
        assert_eq!(
            socket("C6120001:0050"),
            Some(("198.18.0.1".parse().unwrap(), 80))
        );
        assert_eq!(
            socket("[0000:0000:0000:0000:0000:ffff:c612:0001]:FFFF"),
            Some(("::ffff:198.18.0.1".parse().unwrap(), 65535))
        );
        for bad in [
            "C61201:0050",
            "C6120001",
            "C6120001:10000",
            "[::1:0050",
            "xyz:0050",
        ] {
            assert_eq!(socket(bad), None, "{bad}");
        }
    }
}
