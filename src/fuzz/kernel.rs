//! What the kernel and its tools hand back: ipset's and conntrack's
//! netlink replies, address dumps, `/proc/net/ip_vs`, `iptables-save`.

use std::{collections::BTreeMap, fmt::Write as _, net::IpAddr};

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_route::RouteNetlinkMessage;

use crate::{
    desired::{SetEntry, SetType},
    kernel::{
        addresses::real::{address_of, host_message},
        conntrack::{
            real::{entry, tuple_attributes, udp_flow, udp_tuple, Ctnetlink},
            Flow,
        },
        ipsets::{
            netlink::{
                attribute::AttrWriter,
                entry,
                message::{replies, Reply},
            },
            real::listed_message,
            SetState,
        },
        iptables::{canon, save},
        ipvs::proc_table,
    },
    model::IpFamily,
    proxier::iptables::saved,
};

/// A datagram of an ipset list dump, read as the proxy reads one: every
/// entry read is one of kube-proxy's set types, and written as a
/// request's element it reads back the same.
pub fn ipset_listing(data: &[u8]) {
    let mut sets: BTreeMap<String, SetState> = BTreeMap::new();
    for reply in replies(data) {
        match reply {
            Ok(Reply::Ipset { attrs, .. }) => {
                let _ = listed_message(&mut sets, "KUBE-", attrs);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    for state in sets.values() {
        assert!(state.spec.name.starts_with("KUBE-"), "{:?}", state.spec);
        for listed in &state.entries {
            assert_eq!(
                entry_type(listed),
                state.spec.set_type,
                "{}: {listed:?}",
                state.spec.name
            );
            assert_eq!(
                &write_and_read(state.spec.set_type, listed),
                listed,
                "{}: an element read back differently",
                state.spec.name
            );
        }
    }
}

fn entry_type(entry: &SetEntry) -> SetType {
    match entry {
        SetEntry::Ip(_) => SetType::HashIp,
        SetEntry::IpPort(..) => SetType::HashIpPort,
        SetEntry::IpPortIp(..) => SetType::HashIpPortIp,
        SetEntry::IpPortNet(..) => SetType::HashIpPortNet,
        SetEntry::Port(_) => SetType::BitmapPort,
    }
}

fn write_and_read(set_type: SetType, entry: &SetEntry) -> SetEntry {
    let mut data = Vec::new();
    entry::encode(&mut AttrWriter::new(&mut data), entry);
    match entry::decode(set_type, &data) {
        Ok(read) => read,
        Err(e) => panic!("our own element {entry:?} does not read: {e}"),
    }
}

/// A message of a conntrack dump: a UDP flow read from it, written as
/// the tuples of a deletion, reads back the same.
pub fn conntrack_reply(data: &[u8]) {
    let Ok(message) = NetlinkMessage::<Ctnetlink>::deserialize(data) else {
        return;
    };
    let NetlinkPayload::InnerMessage(message) = message.payload else {
        return;
    };
    let Some(Flow { original, reply }) = entry(&message).and_then(udp_flow)
    else {
        return;
    };
    for tuple in [original, reply] {
        assert_eq!(
            udp_tuple(&tuple_attributes(&tuple)),
            Some(tuple),
            "a flow's tuple written for a deletion reads back differently"
        );
    }
}

/// A message of an address dump: the address read from it, written as
/// the proxy writes an address, reads back the same.
pub fn address_reply(data: &[u8]) {
    let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(data)
    else {
        return;
    };
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(address)) =
        message.payload
    else {
        return;
    };
    let Some(ip) = address_of(&address) else {
        return;
    };
    let written = host_message(address.header.index, ip);
    assert_eq!(address_of(&written), Some(ip));
}

/// `/proc/net/ip_vs`: what is read, printed as the kernel prints it and
/// read again, is what was read.
pub fn proc_ip_vs(data: &[u8]) {
    let Ok(listed) = proc_table::parse(data) else {
        return;
    };
    let mut text = String::from(
        "IP Virtual Server version 1.2.1 (size=4096)\n\
         Prot LocalAddress:Port Scheduler Flags\n  \
         -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n",
    );
    for (key, dests) in &listed.dests {
        let _ = writeln!(
            text,
            "{}  {} rr ",
            key.protocol.as_str(),
            proc_socket(key.address, key.port)
        );
        for (dest, state) in dests {
            let _ = writeln!(
                text,
                "  -> {}      Masq    {}      {}          {}         ",
                proc_socket(dest.address, dest.port),
                state.weight,
                state.active_conns,
                state.inactive_conns
            );
        }
    }
    let again = proc_table::parse(text.as_bytes());
    assert!(again.is_ok(), "our own text does not read");
    let again = again.unwrap_or_default();
    assert!(again.unreadable.is_empty(), "{:?}", again.unreadable);
    assert_eq!(again.dests, listed.dests, "read back differently:\n{text}");
}

/// An address and port as the kernel's table prints them.
fn proc_socket(address: IpAddr, port: u16) -> String {
    match address {
        IpAddr::V4(v4) => format!("{:08X}:{port:04X}", u32::from(v4)),
        IpAddr::V6(v6) => {
            let groups: Vec<String> =
                v6.segments().iter().map(|g| format!("{g:04x}")).collect();
            format!("[{}]:{port:04X}", groups.join(":"))
        }
    }
}

/// An `iptables-save` dump, as either family reads it: the parsed form
/// is a fixed point (printed and parsed again it is the same), every
/// word the tokenizer reads survives quoting, and what the proxy makes
/// of a dump (its missing jumps, its clean-up, its normalised part) is
/// computed without a panic.
pub fn iptables_save(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for family in [IpFamily::V4, IpFamily::V6] {
        let tables = save::parse(family, &text);
        let mut printed = String::new();
        for (name, table) in &tables {
            let _ = writeln!(printed, "*{name}");
            for (chain, policy) in &table.chains {
                let _ = writeln!(printed, ":{chain} {policy}");
            }
            for (chain, spec) in &table.rules {
                let _ = writeln!(printed, "-A {chain} {spec}");
            }
            printed.push_str("COMMIT\n");
        }
        assert_eq!(
            save::parse(family, &printed),
            tables,
            "the parsed dump is not a fixed point:\n{printed}"
        );
        for table in ["nat", "filter"] {
            let _ = saved::missing_jumps(family, table, &text);
            let _ = saved::cleanup(family, table, &text);
        }
        let _ = saved::normalise(family, &text);
    }
    for line in text.lines() {
        let Ok(words) = canon::tokenize(line) else {
            continue;
        };
        for word in words {
            let quoted = canon::quote(&word);
            assert_eq!(
                canon::tokenize(&quoted).ok(),
                Some(vec![word.clone()]),
                "{word:?} quoted as {quoted:?}"
            );
        }
    }
}
