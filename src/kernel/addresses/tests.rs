use std::net::{IpAddr, Ipv4Addr};

use super::{contract, AddressOp, Addresses, AddressesModel, BoundAddress};
use crate::kernel::ErrorKind;

#[tokio::test]
async fn model_passes_the_contract() {
    let mut m = AddressesModel::new().with_link("lo", [ip(127, 0, 0, 1)]);
    contract::link_lifecycle(&mut m).await;
    contract::add_list_delete(&mut m).await;
    contract::multicast_is_an_address_like_any_other(&mut m).await;
    contract::errors_are_per_operation(&mut m).await;
    contract::missing_link(&mut m).await;
    contract::detached_writes_answer_like_apply(&mut m).await;
    contract::local_addresses_skip_the_link(&mut m).await;
    // Every scenario cleaned up after itself.
    assert_eq!(m.links.keys().collect::<Vec<_>>(), ["lo"]);
}

fn ip(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

#[tokio::test]
async fn model_creates_the_dummy_down_and_keeps_other_links() {
    let mut m =
        AddressesModel::new().with_link("kipt-eth0", [ip(198, 18, 1, 1)]);
    m.ensure_dummy("kube-ipvs0").await.unwrap();
    // An existing link is kept as it is, whatever its kind.
    m.ensure_dummy("kipt-eth0").await.unwrap();
    let dummy = &m.links["kube-ipvs0"];
    assert!(dummy.dummy && !dummy.up);
    let eth = &m.links["kipt-eth0"];
    assert!(!eth.dummy && eth.up && eth.addresses.len() == 1);
}

#[tokio::test]
async fn model_errors_carry_the_kernels_errno() {
    let mut m = AddressesModel::new();
    m.ensure_dummy("kube-ipvs0").await.unwrap();
    let a = ip(198, 18, 0, 1);
    let results = m
        .apply(
            "kube-ipvs0",
            &[
                AddressOp::Add(a),
                AddressOp::Add(a),
                AddressOp::Delete(ip(198, 18, 0, 2)),
            ],
        )
        .await;
    let errnos: Vec<_> = results
        .iter()
        .map(|r| r.as_ref().err().and_then(|e| e.errno))
        .collect();
    assert_eq!(errnos, [None, Some(17), Some(99)]);
    let missing = m.apply("kipt-gone", &[AddressOp::Add(a)]).await;
    let e = missing[0].as_ref().unwrap_err();
    assert_eq!((e.kind, e.errno), (ErrorKind::NotFound, Some(19)));
    assert_eq!(m.address_ops, 4);
}

#[test]
fn errors_name_the_address_with_its_prefix_and_the_link() {
    let cases = [
        (ip(198, 18, 0, 10), "198.18.0.10/32 on kube-ipvs0"),
        (
            "2001:db8::a".parse().unwrap(),
            "2001:db8::a/128 on kube-ipvs0",
        ),
    ];
    for (address, want) in cases {
        let name = BoundAddress {
            address,
            link: "kube-ipvs0",
        };
        assert_eq!(name.to_string(), want);
    }
}

#[test]
fn errnos_map_to_kinds() {
    let cases = [
        (17, ErrorKind::Exists),
        (2, ErrorKind::NotFound),
        (19, ErrorKind::NotFound),
        (99, ErrorKind::NotFound),
        (22, ErrorKind::Invalid),
        (1, ErrorKind::Other),
    ];
    for (errno, kind) in cases {
        assert_eq!(super::errno_kind(errno), kind, "errno {errno}");
    }
}

#[test]
fn opening_outside_a_runtime_is_an_error_not_a_panic() {
    let e = super::NetlinkAddresses::new().err().map(|e| e.kind);
    assert_eq!(e, Some(ErrorKind::Transport));
    let e = crate::kernel::conntrack::NetlinkConntrack::new()
        .err()
        .map(|e| e.kind);
    assert_eq!(e, Some(ErrorKind::Transport));
}

/// Adds and deletes name the address itself, whatever it is. rtnetlink's
/// builder writes no address at all for IPv4 multicast (found by
/// fuzzing), and the kernel then deletes the link's first /32 instead.
#[test]
fn a_host_message_carries_its_address() {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
    use rtnetlink::packet_route::{
        address::AddressAttribute, RouteNetlinkMessage,
    };

    use super::real::{address_of, host_message};

    for text in ["198.18.0.1", "239.1.1.1", "2001:db8::1", "ff05::1"] {
        let ip: IpAddr = text.parse().unwrap();
        let message = host_message(7, ip);
        assert_eq!(message.header.index, 7);
        assert_eq!(message.header.prefix_len, super::host_prefix_len(ip));
        assert_eq!(
            message.attributes,
            [AddressAttribute::Address(ip), AddressAttribute::Local(ip)],
            "{ip}"
        );
        let mut wire =
            NetlinkMessage::from(RouteNetlinkMessage::NewAddress(message));
        wire.finalize();
        let mut bytes = vec![0; wire.buffer_len()];
        wire.serialize(&mut bytes);
        let read = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes)
            .unwrap()
            .payload;
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(read)) =
            read
        else {
            panic!("{ip}: read back as {read:?}");
        };
        assert_eq!(address_of(&read), Some(ip), "{ip}");
    }
}
