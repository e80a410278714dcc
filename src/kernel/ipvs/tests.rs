use std::net::IpAddr;

use ipvs_sys::{Destination, ForwardMethod, Service, ServiceFlags};
use pretty_assertions::assert_eq;

use super::{
    contract::{self, dest, service, tcp},
    real::{
        from_destination, from_service, kernel_error, sockopt_route,
        to_destination, to_service,
    },
    DestSpec, DestState, IpvsModel, IpvsOp, ServiceSpec,
};
use crate::{
    kernel::ErrorKind,
    model::{Protocol, SchedulerFlags},
};

/// Every contract scenario against a fresh model.
#[tokio::test]
async fn model_passes_the_contract() {
    contract::programs_services_and_real_servers(&mut IpvsModel::new()).await;
    contract::duplicates_are_refused_with_eexist(&mut IpvsModel::new()).await;
    contract::missing_objects_are_not_found(&mut IpvsModel::new()).await;
    contract::updates_change_settings_and_keep_real_servers(
        &mut IpvsModel::new(),
    )
    .await;
    contract::deletes_remove_services_with_their_real_servers(
        &mut IpvsModel::new(),
    )
    .await;
    contract::a_failure_does_not_stop_the_batch(&mut IpvsModel::new()).await;
    contract::unknown_scheduler_is_not_found(&mut IpvsModel::new()).await;
    contract::real_server_of_the_other_family_is_invalid(&mut IpvsModel::new())
        .await;
    contract::weight_above_int_max_is_refused(&mut IpvsModel::new()).await;
}

#[test]
fn only_the_mh_scheduler_gets_the_source_port_flag() {
    for (scheduler, flag) in [("mh", true), ("rr", false), ("sh", false)] {
        let spec = ServiceSpec::new(tcp("198.18.0.1", 80), scheduler, None);
        assert_eq!(
            spec.flags.contains(SchedulerFlags::PORT),
            flag,
            "{scheduler}"
        );
        assert!(!spec.flags.contains(SchedulerFlags::FALLBACK));
    }
}

/// What goes on the wire is what kube-proxy's libipvs call sends.
#[test]
fn services_are_sent_as_kube_proxy_sends_them() {
    struct Case {
        spec: ServiceSpec,
        flags: ServiceFlags,
        timeout: u32,
        raw_netmask: u32,
    }
    let cases = [
        Case {
            spec: ServiceSpec::new(tcp("198.18.0.1", 80), "rr", None),
            flags: ServiceFlags::EMPTY,
            timeout: 0,
            raw_netmask: 0xffff_ffff,
        },
        Case {
            spec: ServiceSpec::new(tcp("198.18.0.1", 80), "rr", Some(10800)),
            flags: ServiceFlags::PERSISTENT,
            timeout: 10800,
            raw_netmask: 0xffff_ffff,
        },
        Case {
            spec: ServiceSpec::new(tcp("2001:db8::1", 80), "mh", Some(60)),
            flags: ServiceFlags::PERSISTENT | ServiceFlags(0x10),
            timeout: 60,
            // The kernel reads an IPv6 "netmask" as a prefix length.
            raw_netmask: u32::from_be_bytes(128u32.to_ne_bytes()),
        },
    ];
    for case in cases {
        let service = to_service(&case.spec);
        assert_eq!(service.scheduler, case.spec.scheduler);
        assert_eq!(service.flags, case.flags, "{}", case.spec.key);
        assert_eq!(service.timeout, case.timeout, "{}", case.spec.key);
        assert_eq!(
            service.raw_netmask(),
            case.raw_netmask,
            "{}",
            case.spec.key
        );
        assert_eq!(from_service(&service), Some(case.spec));
    }
}

#[test]
fn the_kernel_hashed_flag_does_not_change_what_is_read() {
    let spec = ServiceSpec::new(
        service(Protocol::Sctp, "198.18.0.1", 80),
        "mh",
        Some(5),
    );
    let mut service = to_service(&spec);
    service.flags |= ServiceFlags::HASHED;
    assert_eq!(from_service(&service), Some(spec));
}

#[test]
fn services_we_never_program_are_not_read() {
    let fwmark = Service::new(ipvs_sys::ServiceKey::fwmark(
        ipvs_sys::AddressFamily::Inet,
        7,
    ));
    let other = Service::new(ipvs_sys::ServiceKey::Inet {
        protocol: ipvs_sys::Protocol::Other(33),
        address: "198.18.0.1".parse().unwrap(),
        port: 80,
    });
    assert_eq!(from_service(&fwmark), None);
    assert_eq!(from_service(&other), None);
}

#[test]
fn real_servers_are_masqueraded_and_read_with_their_counts() {
    let spec = DestSpec {
        key: dest("198.19.0.1", 8080),
        weight: 0,
    };
    let sent = to_destination(&spec);
    assert_eq!(sent.fwd_method, ForwardMethod::Masquerade);
    assert_eq!(sent.weight, 0);

    let address: IpAddr = "198.19.0.1".parse().unwrap();
    let mut reply = Destination::new(address, 8080).with_weight(1);
    reply.conns = Some(ipvs_sys::ConnCounts {
        active: 3,
        inactive: 4,
        persistent: 5,
    });
    assert_eq!(
        from_destination(&reply),
        (
            spec.key,
            DestState {
                weight: 1,
                active_conns: 3,
                inactive_conns: 4
            }
        )
    );
}

#[test]
fn ipvs_sys_errors_become_kernel_errors_naming_our_object() {
    let unavailable =
        kernel_error("TCP 198.18.0.1:80", &ipvs_sys::Error::IpvsUnavailable);
    assert_eq!(unavailable.kind, ErrorKind::Unavailable);
    assert_eq!(unavailable.object, "TCP 198.18.0.1:80");
    assert_eq!(unavailable.errno, None);
}

#[tokio::test]
async fn the_model_counts_operations_and_takes_connection_counts() {
    let mut model = IpvsModel::new();
    let key = tcp("198.18.0.1", 80);
    let backend = dest("198.19.0.1", 8080);
    let ops = [
        IpvsOp::AddService(ServiceSpec::new(key, "rr", None)),
        IpvsOp::AddDest(
            key,
            DestSpec {
                key: backend,
                weight: 1,
            },
        ),
        IpvsOp::DeleteService(tcp("198.18.0.9", 80)),
    ];
    let results = super::Ipvs::apply(&mut model, &ops).await;
    let outcomes: Vec<_> = results.iter().map(contract::outcome).collect();
    assert_eq!(
        outcomes,
        [
            Ok(()),
            Ok(()),
            Err((ErrorKind::NotFound, Some(libc::ESRCH)))
        ]
    );
    let missing = results[2].as_ref().expect_err("no such service");
    assert_eq!(missing.object, "TCP 198.18.0.9:80");
    // The count is of what was sent, so the failed delete is in it.
    assert_eq!(model.applied_ops(), 3);
    assert!(model.set_conns(&key, &backend, 2, 7));
    assert!(!model.set_conns(&key, &dest("198.19.0.9", 1), 1, 1));
    let dests = super::Ipvs::dests(&mut model, &key).await.unwrap();
    assert_eq!(
        dests.get(&backend),
        Some(&DestState {
            weight: 1,
            active_conns: 2,
            inactive_conns: 7
        })
    );
}

/// IPv4 virtual servers' changes go over the socket options, IPv6 ones
/// over netlink; a virtual server with a change the options cannot carry
/// (a real server of the other family) has all its changes on netlink,
/// so that they keep their order.
#[test]
fn ipv4_changes_go_by_socket_option_unless_their_service_cannot() {
    let v4 = tcp("198.18.0.1", 80);
    let mixed = tcp("198.18.0.2", 80);
    let v6 = tcp("2001:db8::1", 80);
    let spec = |key| ServiceSpec::new(key, "rr", None);
    let real = |address: &str| DestSpec {
        key: dest(address, 8080),
        weight: 1,
    };
    let ops = [
        IpvsOp::AddService(spec(v4)),
        IpvsOp::AddDest(v4, real("198.19.0.1")),
        IpvsOp::AddService(spec(mixed)),
        IpvsOp::AddDest(mixed, real("198.19.0.2")),
        IpvsOp::AddDest(mixed, real("2001:db8::2")),
        IpvsOp::AddService(spec(v6)),
        IpvsOp::UpdateDest(v6, real("2001:db8::3")),
        IpvsOp::DeleteDest(v4, dest("198.19.0.4", 8080)),
        IpvsOp::DeleteService(mixed),
        IpvsOp::UpdateService(spec(v4)),
        IpvsOp::DeleteService(v6),
    ];
    assert_eq!(
        sockopt_route(&ops),
        [
            true, true, false, false, false, false, false, true, false, true,
            false
        ]
    );
    assert!(sockopt_route(&[]).is_empty());
}

/// Opened outside a runtime, the netlink connection has nothing to
/// drive it: an error that says so, not tokio's panic.
#[test]
fn opening_outside_a_runtime_is_an_error() {
    let error = match super::NetlinkIpvs::new() {
        Ok(_) => panic!("opened with no runtime to drive the connection"),
        Err(error) => error,
    };
    assert_eq!(error.kind, ErrorKind::Transport);
    assert!(error.to_string().contains("no tokio runtime"), "{error}");
}
