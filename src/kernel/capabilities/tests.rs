use std::collections::BTreeSet;

use super::*;
use crate::kernel::{
    addresses::AddressesModel, ipsets::IpsetsModel, ipvs::IpvsModel,
};

fn models() -> FacilityProbe<IpvsModel, AddressesModel, IpsetsModel> {
    FacilityProbe {
        ipvs: IpvsModel::new(),
        addresses: AddressesModel::new(),
        ipsets: Ok(IpsetsModel::new()),
        raw_socket: Ok(()),
    }
}

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(future)
}

#[test]
fn a_kernel_with_everything_passes_and_keeps_nothing_of_the_probe() {
    let mut probe = models();
    block_on(check(&mut probe, "rr")).expect("the models have everything");
    let table = block_on(probe.ipvs.dump()).expect("dump");
    assert!(table.services.is_empty(), "{table:?}");
    assert!(probe.addresses.links.is_empty(), "{:?}", probe.addresses);
}

#[test]
fn a_probe_service_left_behind_is_replaced_then_removed() {
    let mut probe = models();
    let stale =
        IpvsOp::AddService(ServiceSpec::new(PROBE_SERVICE, "wrr", None));
    let added = block_on(probe.ipvs.apply(&[stale]));
    assert_eq!(added, vec![Ok(())]);
    block_on(check(&mut probe, "rr")).expect("passes");
    let table = block_on(probe.ipvs.dump()).expect("dump");
    assert!(table.services.is_empty(), "{table:?}");
}

/// A kernel that lacks what it is told to, and counts what it was asked.
#[derive(Default)]
struct Lacking {
    ipvs: bool,
    schedulers_in_use: Vec<String>,
    schedulers: BTreeSet<String>,
    dummy: bool,
    ipset: bool,
    set_types: Vec<SetType>,
    asked_scheduler: Vec<String>,
    asked_types: usize,
    /// Each missing part answers EPERM, as the kernel answers a process
    /// without CAP_NET_ADMIN before it looks for the module.
    denied: bool,
    /// The errno a raw socket is refused with.
    raw_socket_errno: Option<i32>,
}

impl Lacking {
    fn unavailable(&self, object: &str) -> KernelError {
        if self.denied {
            KernelError::new(
                ErrorKind::Other,
                object,
                "Operation not permitted",
            )
            .with_errno(libc::EPERM)
        } else {
            KernelError::new(
                ErrorKind::Unavailable,
                object,
                "not in this kernel",
            )
        }
    }
}

impl Probe for Lacking {
    async fn ipvs_schedulers(&mut self) -> Result<Vec<String>, KernelError> {
        if self.ipvs {
            Ok(self.schedulers_in_use.clone())
        } else {
            Err(self.unavailable("IPVS"))
        }
    }

    async fn try_scheduler(
        &mut self,
        scheduler: &str,
    ) -> Result<(), KernelError> {
        self.asked_scheduler.push(scheduler.to_owned());
        if self.schedulers.contains(scheduler) {
            Ok(())
        } else {
            Err(KernelError::not_found(PROBE_SERVICE))
        }
    }

    async fn try_dummy_link(&mut self) -> Result<(), KernelError> {
        if self.dummy {
            Ok(())
        } else {
            Err(self.unavailable("link kube-ipvs-probe"))
        }
    }

    fn ipsets(&mut self) -> Result<(), KernelError> {
        if self.ipset {
            Ok(())
        } else {
            Err(self.unavailable("ipset protocol"))
        }
    }

    fn set_type(&mut self, set_type: SetType) -> Result<(), KernelError> {
        self.asked_types += 1;
        if self.set_types.contains(&set_type) {
            Ok(())
        } else {
            Err(self.unavailable(set_type.as_str()))
        }
    }

    fn raw_socket(&mut self) -> Result<(), KernelError> {
        match self.raw_socket_errno {
            None => Ok(()),
            Some(errno) => Err(KernelError::new(
                ErrorKind::Other,
                "socket(AF_INET, SOCK_RAW, IPPROTO_RAW)",
                "refused",
            )
            .with_errno(errno)),
        }
    }
}

fn complete() -> Lacking {
    Lacking {
        ipvs: true,
        schedulers: ["rr".to_owned()].into(),
        dummy: true,
        ipset: true,
        set_types: SET_TYPES.to_vec(),
        ..Lacking::default()
    }
}

fn needs(result: Result<(), Refused>) -> Vec<Need> {
    match result {
        Ok(()) => Vec::new(),
        Err(Refused::Unsupported(u)) => {
            u.0.into_iter().map(|m| m.need).collect()
        }
        Err(Refused::Forbidden(f)) => panic!("not a kernel's lack: {f}"),
    }
}

/// The capabilities the check says this process lacks.
fn lacked(result: Result<(), Refused>) -> Vec<&'static str> {
    match result {
        Err(Refused::Forbidden(f)) => {
            f.0.iter().map(|l| l.capability).collect()
        }
        Ok(()) | Err(Refused::Unsupported(_)) => Vec::new(),
    }
}

#[test]
fn everything_is_asked_and_every_gap_reported() {
    let mut kernel = complete();
    assert_eq!(needs(block_on(check(&mut kernel, "rr"))), vec![]);
    assert_eq!(kernel.asked_scheduler, vec!["rr"]);
    assert_eq!(kernel.asked_types, SET_TYPES.len());

    // This machine's kernel: neither IPVS nor dummy links.
    let mut kernel = Lacking {
        ipvs: false,
        dummy: false,
        ..complete()
    };
    let result = block_on(check(&mut kernel, "rr"));
    assert_eq!(needs(result), vec![Need::Ipvs, Need::DummyLinks]);
    assert!(kernel.asked_scheduler.is_empty(), "no IPVS, no scheduler");

    let mut kernel = Lacking {
        set_types: vec![SetType::HashIp],
        ..complete()
    };
    let missing = needs(block_on(check(&mut kernel, "rr")));
    assert_eq!(missing.len(), SET_TYPES.len() - 1, "{missing:?}");

    let mut kernel = Lacking {
        ipset: false,
        ..complete()
    };
    assert_eq!(needs(block_on(check(&mut kernel, "rr"))), vec![Need::Ipset]);
    assert_eq!(kernel.asked_types, 0, "no ipset, no type queries");
}

#[test]
fn a_scheduler_in_use_is_not_probed() {
    let mut kernel = Lacking {
        schedulers_in_use: vec!["wrr".to_owned(), "lc".to_owned()],
        schedulers: BTreeSet::new(),
        ..complete()
    };
    assert_eq!(needs(block_on(check(&mut kernel, "lc"))), vec![]);
    assert!(kernel.asked_scheduler.is_empty());
    assert_eq!(
        needs(block_on(check(&mut kernel, "sh"))),
        vec![Need::Scheduler("sh".to_owned())]
    );
}

#[test]
fn the_message_is_one_line_naming_each_gap_and_its_module() {
    let mut kernel = Lacking {
        ipvs: false,
        dummy: false,
        ..complete()
    };
    let message = block_on(check(&mut kernel, "rr"))
        .expect_err("missing")
        .to_string();
    assert!(!message.contains('\n'), "{message}");
    assert!(message.starts_with("this kernel cannot run IPVS mode"));
    assert!(message.contains("missing IPVS (IPVS: not in this kernel"));
    assert!(message.contains("dummy links (link kube-ipvs-probe"));
    assert!(message.contains("`modprobe ip_vs dummy`"), "{message}");

    let mut kernel = Lacking {
        schedulers: BTreeSet::new(),
        ..complete()
    };
    let message = block_on(check(&mut kernel, "sed"))
        .expect_err("missing")
        .to_string();
    assert!(message.contains("the IPVS scheduler \"sed\""), "{message}");
    assert!(message.contains("load it on the node with `modprobe ip_vs_sed`"));
}

#[test]
fn modules_are_the_kernel_s_names() {
    let modules: Vec<String> = SET_TYPES
        .iter()
        .map(|t| Need::SetType(*t).module())
        .collect();
    assert_eq!(
        modules,
        vec![
            "ip_set_hash_ip",
            "ip_set_hash_ipport",
            "ip_set_hash_ipportip",
            "ip_set_hash_ipportnet",
            "ip_set_bitmap_port",
        ]
    );
    assert_eq!(Need::Scheduler("mh".into()).module(), "ip_vs_mh");
}

#[test]
fn a_refused_process_is_told_the_capability_to_add_not_a_module() {
    // Without CAP_NET_ADMIN every part answers EPERM, present or not.
    let mut kernel = Lacking {
        denied: true,
        ipvs: false,
        dummy: false,
        ipset: false,
        ..complete()
    };
    let result = block_on(check(&mut kernel, "rr"));
    let message = result.clone().expect_err("refused").to_string();
    assert_eq!(lacked(result), vec!["NET_ADMIN"]);
    assert!(!message.contains('\n'), "{message}");
    assert!(message.starts_with("this process may not program the kernel: it lacks CAP_NET_ADMIN (IPVS: "), "{message}");
    assert!(message.contains("; dummy links: "), "{message}");
    assert!(message.contains("; ipset: "), "{message}");
    assert!(message.contains("errno 1"), "{message}");
    assert!(
        message.contains("add NET_ADMIN to securityContext.capabilities.add"),
        "{message}"
    );
    assert!(
        !message.contains("modprobe"),
        "no module would help: {message}"
    );

    // Both capabilities lacking: both named, in one line.
    let mut kernel = Lacking {
        denied: true,
        dummy: false,
        raw_socket_errno: Some(libc::EPERM),
        ..complete()
    };
    let result = block_on(check(&mut kernel, "rr"));
    let message = result.clone().expect_err("refused").to_string();
    assert_eq!(lacked(result), vec!["NET_ADMIN", "NET_RAW"]);
    assert!(
        message.contains("CAP_NET_RAW (a raw IPv4 socket: "),
        "{message}"
    );
    assert!(
        message.contains("add NET_ADMIN and NET_RAW to"),
        "{message}"
    );
}

#[test]
fn a_raw_socket_matters_only_when_refused() {
    let mut kernel = Lacking {
        raw_socket_errno: Some(libc::EPERM),
        ..complete()
    };
    assert_eq!(lacked(block_on(check(&mut kernel, "rr"))), vec!["NET_RAW"]);
    let mut kernel = Lacking {
        raw_socket_errno: Some(libc::EACCES),
        ..complete()
    };
    assert_eq!(lacked(block_on(check(&mut kernel, "rr"))), vec!["NET_RAW"]);
    // A kernel without IPv4 raw sockets: the reads fall back to dumps.
    let mut kernel = Lacking {
        raw_socket_errno: Some(libc::EAFNOSUPPORT),
        ..complete()
    };
    assert_eq!(needs(block_on(check(&mut kernel, "rr"))), vec![]);
    // A lacking kernel with a refused raw socket: the capability first,
    // since the kernel's answers may change once the process has it.
    let mut kernel = Lacking {
        raw_socket_errno: Some(libc::EPERM),
        dummy: false,
        ..complete()
    };
    assert_eq!(lacked(block_on(check(&mut kernel, "rr"))), vec!["NET_RAW"]);
}
