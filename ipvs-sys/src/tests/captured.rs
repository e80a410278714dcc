//! Requests captured from ipvsadm 1.31 (Debian) in the guest, with
//! `strace -xx -e trace=sendmsg` on kernel 6.1: the generic netlink part
//! of each message (genl header and attributes).
//!
//! ipvsadm sets NLA_F_NESTED on nests (`.. 01 80`), always sends the whole
//! service (an empty scheduler name for deletes) and the tunnel
//! attributes; we send only what the kernel reads, without the flag, as
//! the kernel itself does. Both must decode to the same objects.

use std::net::IpAddr;

use pretty_assertions::assert_eq;

use super::{decode_genl, hex};
use crate::{
    AddressFamily, Destination, ForwardMethod, IpvsCmd, IpvsMessage, Service,
    ServiceFlags, ServiceKey, Timeouts, Tunnel,
};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("fixture address")
}

const ADD_TCP_RR: &str = "
    01 01 00 00 54 00 01 80 06 00 01 00 02 00 00 00
    06 00 02 00 06 00 00 00 14 00 03 00 c6 12 00 0a
    00 00 00 00 00 00 00 00 00 00 00 00 06 00 04 00
    00 50 00 00 07 00 06 00 72 72 00 00 0c 00 07 00
    00 00 00 00 ff ff ff ff 08 00 08 00 00 00 00 00
    08 00 09 00 ff ff ff ff";

const EDIT_UDP6_RR: &str = "
    02 01 00 00 54 00 01 80 06 00 01 00 0a 00 00 00
    06 00 02 00 11 00 00 00 14 00 03 00 20 01 0d b8
    00 00 00 00 00 00 00 00 00 00 00 10 06 00 04 00
    00 35 00 00 07 00 06 00 72 72 00 00 0c 00 07 00
    00 00 00 00 ff ff ff ff 08 00 08 00 00 00 00 00
    08 00 09 00 80 00 00 00";

/// `-A -u [2001:db8::10]:53 -s sh -b sh-port -p 600 -M 64`
const ADD_UDP6_SH_PERSISTENT: &str = "
    01 01 00 00 54 00 01 80 06 00 01 00 0a 00 00 00
    06 00 02 00 11 00 00 00 14 00 03 00 20 01 0d b8
    00 00 00 00 00 00 00 00 00 00 00 10 06 00 04 00
    00 35 00 00 07 00 06 00 73 68 00 00 0c 00 07 00
    11 00 00 00 ff ff ff ff 08 00 08 00 58 02 00 00
    08 00 09 00 40 00 00 00";

const ADD_FWM7_RR: &str = "
    01 01 00 00 38 00 01 80 06 00 01 00 02 00 00 00
    08 00 05 00 07 00 00 00 07 00 06 00 72 72 00 00
    0c 00 07 00 00 00 00 00 ff ff ff ff 08 00 08 00
    00 00 00 00 08 00 09 00 ff ff ff ff";

/// `-a -t 198.18.0.10:80 -r 198.19.0.5:8080 -m -w 1`
const ADD_DEST: &str = "
    05 01 00 00 54 00 01 80 06 00 01 00 02 00 00 00
    06 00 02 00 06 00 00 00 14 00 03 00 c6 12 00 0a
    00 00 00 00 00 00 00 00 00 00 00 00 06 00 04 00
    00 50 00 00 05 00 06 00 00 00 00 00 0c 00 07 00
    00 00 00 00 ff ff ff ff 08 00 08 00 00 00 00 00
    08 00 09 00 ff ff ff ff 60 00 02 80 06 00 0b 00
    02 00 00 00 14 00 01 00 c6 13 00 05 00 00 00 00
    00 00 00 00 00 00 00 00 06 00 02 00 1f 90 00 00
    08 00 03 00 00 00 00 00 08 00 04 00 01 00 00 00
    05 00 0d 00 00 00 00 00 06 00 0e 00 00 00 00 00
    06 00 0f 00 00 00 00 00 08 00 05 00 00 00 00 00
    08 00 06 00 00 00 00 00";

/// `-e -t 198.18.0.10:80 -r 198.19.0.5:8080 -m -w 5 -x 100 -y 10`
const EDIT_DEST: &str = "
    06 01 00 00 54 00 01 80 06 00 01 00 02 00 00 00
    06 00 02 00 06 00 00 00 14 00 03 00 c6 12 00 0a
    00 00 00 00 00 00 00 00 00 00 00 00 06 00 04 00
    00 50 00 00 05 00 06 00 00 00 00 00 0c 00 07 00
    00 00 00 00 ff ff ff ff 08 00 08 00 00 00 00 00
    08 00 09 00 ff ff ff ff 60 00 02 80 06 00 0b 00
    02 00 00 00 14 00 01 00 c6 13 00 05 00 00 00 00
    00 00 00 00 00 00 00 00 06 00 02 00 1f 90 00 00
    08 00 03 00 00 00 00 00 08 00 04 00 05 00 00 00
    05 00 0d 00 00 00 00 00 06 00 0e 00 00 00 00 00
    06 00 0f 00 00 00 00 00 08 00 05 00 64 00 00 00
    08 00 06 00 0a 00 00 00";

const DEL_FWM7: &str = "
    03 01 00 00 38 00 01 80 06 00 01 00 02 00 00 00
    08 00 05 00 07 00 00 00 05 00 06 00 00 00 00 00
    0c 00 07 00 00 00 00 00 ff ff ff ff 08 00 08 00
    00 00 00 00 08 00 09 00 ff ff ff ff";

const SET_TIMEOUTS: &str = "
    0c 01 00 00 08 00 04 00 84 03 00 00 08 00 05 00
    78 00 00 00 08 00 06 00 2c 01 00 00";

const FLUSH: &str = "11 01 00 00";

fn decoded(bytes: &str) -> IpvsMessage {
    decode_genl(&hex(bytes)).expect("ipvsadm's request decodes")
}

#[test]
fn ipvsadm_services_decode_to_the_same_services() {
    let tcp = ServiceKey::tcp(ip("198.18.0.10"), 80);
    let udp6 = ServiceKey::udp(ip("2001:db8::10"), 53);
    let cases = [
        (
            ADD_TCP_RR,
            IpvsCmd::NewService,
            Service::new(tcp).with_scheduler("rr"),
        ),
        (
            EDIT_UDP6_RR,
            IpvsCmd::SetService,
            Service::new(udp6).with_scheduler("rr"),
        ),
        (
            ADD_UDP6_SH_PERSISTENT,
            IpvsCmd::NewService,
            Service::new(udp6)
                .with_scheduler("sh")
                .with_flags(ServiceFlags::SH_PORT)
                .persistent(600)
                .with_netmask(64),
        ),
        (
            ADD_FWM7_RR,
            IpvsCmd::NewService,
            Service::new(ServiceKey::fwmark(AddressFamily::Inet, 7))
                .with_scheduler("rr"),
        ),
        (
            DEL_FWM7,
            IpvsCmd::DelService,
            Service::new(ServiceKey::fwmark(AddressFamily::Inet, 7))
                .with_scheduler(""),
        ),
    ];
    for (bytes, cmd, service) in cases {
        let message = decoded(bytes);
        assert_eq!(message.cmd, cmd);
        assert_eq!(message.to_service().expect("service"), service);
    }
}

#[test]
fn our_service_requests_match_ipvsadm_but_for_the_nested_flag() {
    let cases = [
        (
            ADD_TCP_RR,
            IpvsMessage::new_service(
                &Service::new(ServiceKey::tcp(ip("198.18.0.10"), 80))
                    .with_scheduler("rr"),
            ),
        ),
        (
            ADD_UDP6_SH_PERSISTENT,
            IpvsMessage::new_service(
                &Service::new(ServiceKey::udp(ip("2001:db8::10"), 53))
                    .with_scheduler("sh")
                    .with_flags(ServiceFlags::SH_PORT)
                    .persistent(600)
                    .with_netmask(64),
            ),
        ),
        (
            ADD_FWM7_RR,
            IpvsMessage::new_service(
                &Service::new(ServiceKey::fwmark(AddressFamily::Inet, 7))
                    .with_scheduler("rr"),
            ),
        ),
        (
            SET_TIMEOUTS,
            IpvsMessage::set_config(&Timeouts {
                tcp: Some(900),
                tcp_fin: Some(120),
                udp: Some(300),
            }),
        ),
        (FLUSH, IpvsMessage::flush()),
    ];
    for (bytes, message) in cases {
        let mut ours = super::encode(message, super::REQUEST_ACK, 1);
        // Past the netlink header; set NLA_F_NESTED on the service nest.
        let mut genl = ours.split_off(16);
        if genl.first() == Some(&1) {
            if let Some(kind_high) = genl.get_mut(7) {
                *kind_high |= 0x80;
            }
        }
        assert_eq!(genl, hex(bytes));
    }
}

#[test]
fn ipvsadm_destinations_decode_to_the_same_destinations() {
    let tcp = ServiceKey::tcp(ip("198.18.0.10"), 80);
    let base =
        Destination::new(ip("198.19.0.5"), 8080).with_tunnel(Tunnel::default());
    let cases = [
        (ADD_DEST, IpvsCmd::NewDest, base.clone()),
        (
            EDIT_DEST,
            IpvsCmd::SetDest,
            base.clone().with_weight(5).with_thresholds(100, 10),
        ),
    ];
    for (bytes, cmd, dest) in cases {
        let message = decoded(bytes);
        assert_eq!(message.cmd, cmd);
        assert_eq!(message.to_service().expect("service").key, tcp);
        assert_eq!(
            message.to_destination(AddressFamily::Inet).expect("dest"),
            dest
        );
        assert_eq!(dest.fwd_method, ForwardMethod::Masquerade);
    }
}

#[test]
fn ipvsadm_timeouts_decode() {
    let message = decoded(SET_TIMEOUTS);
    assert_eq!(message.cmd, IpvsCmd::SetConfig);
    assert_eq!(
        message.to_timeouts(),
        Timeouts {
            tcp: Some(900),
            tcp_fin: Some(120),
            udp: Some(300)
        }
    );
    assert_eq!(decoded(FLUSH).cmd, IpvsCmd::Flush);
}
