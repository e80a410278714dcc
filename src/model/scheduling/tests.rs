use super::*;

#[test]
fn flags_are_the_kernels_bits_and_ipvsadms_names() {
    let all = SchedulerFlags::from_kernel(0x08 | 0x10 | 0x20 | 0x01);
    assert_eq!(all.to_kernel(), 0x38, "persistence is not a scheduler flag");
    assert_eq!(all.names("mh"), ["mh-fallback", "mh-port", "flag-3"]);
    assert_eq!(all.names("sh"), ["sh-fallback", "sh-port", "flag-3"]);
    assert_eq!(all.names("rr"), ["flag-1", "flag-2", "flag-3"]);
    assert_eq!(SchedulerFlags::NONE.names("mh"), Vec::<&str>::new());
}

#[test]
fn upstream_sets_mh_port_with_mh_only() {
    assert_eq!(SchedulerFlags::upstream_default("mh"), SchedulerFlags::PORT);
    assert_eq!(SchedulerFlags::upstream_default("sh"), SchedulerFlags::NONE);
    assert_eq!(SchedulerFlags::upstream_default("rr"), SchedulerFlags::NONE);
}

#[test]
fn flags_parse_against_their_scheduler() {
    let both = SchedulerFlags::parse("mh", "mh-fallback, mh-port").unwrap();
    assert_eq!(both.names("mh"), ["mh-fallback", "mh-port"]);
    assert_eq!(
        SchedulerFlags::parse("sh", "sh-port"),
        Ok(SchedulerFlags::PORT)
    );
    assert_eq!(SchedulerFlags::parse("mh", ""), Ok(SchedulerFlags::NONE));
    assert_eq!(
        SchedulerFlags::parse("mh", "sh-port"),
        Err(FlagsError::OtherScheduler {
            flag: "sh-port".into(),
            scheduler: "mh".into()
        })
    );
    assert!(matches!(
        SchedulerFlags::parse("rr", "mh-port"),
        Err(FlagsError::OtherScheduler { .. })
    ));
    assert_eq!(
        SchedulerFlags::parse("mh", "mh-fast"),
        Err(FlagsError::Unknown("mh-fast".into()))
    );
}

#[test]
fn kube_routers_numbered_flags_go_with_mh() {
    let flags = SchedulerFlags::parse_numbered("mh", "flag-1,flag-2").unwrap();
    assert_eq!(flags.names("mh"), ["mh-fallback", "mh-port"]);
    assert_eq!(
        SchedulerFlags::parse_numbered("mh", "flag-3"),
        Ok(SchedulerFlags::THIRD)
    );
    assert!(SchedulerFlags::parse_numbered("sh", "flag-1").is_err());
    assert!(SchedulerFlags::parse_numbered("mh", "flag-4").is_err());
}

#[test]
fn scheduling_shows_as_ipvsadm_would() {
    let mh = Scheduling::upstream("mh".into());
    assert_eq!(mh.to_string(), "mh (mh-port)");
    assert_eq!(Scheduling::upstream("rr".into()).to_string(), "rr");
}

#[test]
fn a_flag_choice_is_each_schedulers_whole_set() {
    let choice = FlagChoice::parse("mh-fallback").unwrap();
    assert_eq!(
        choice.for_scheduler("mh"),
        SchedulerFlags::FALLBACK,
        "mh-port dropped"
    );
    assert_eq!(choice.for_scheduler("sh"), SchedulerFlags::NONE);
    assert_eq!(choice.for_scheduler("rr"), SchedulerFlags::NONE);
    let both = FlagChoice::parse("sh-port, mh-fallback,mh-port").unwrap();
    assert_eq!(both.names(), ["sh-port", "mh-fallback", "mh-port"]);
    assert_eq!(
        Scheduling::chosen("mh".into(), &both).to_string(),
        "mh (mh-fallback,mh-port)"
    );
    let none = FlagChoice::parse("").unwrap();
    assert_eq!(none.for_scheduler("mh"), SchedulerFlags::PORT, "upstream's");
    assert_eq!(none.names(), Vec::<&str>::new());
    assert_eq!(
        FlagChoice::parse("flag-1"),
        Err(FlagsError::Unknown("flag-1".into()))
    );
    assert_eq!(
        FlagChoice::parse("mh-fast"),
        Err(FlagsError::Unknown("mh-fast".into()))
    );
}

fn annotated(
    pairs: &[(&str, &str)],
) -> (Option<ServiceScheduling>, Vec<AnnotationProblem>) {
    let map: std::collections::BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let mut problems = Vec::new();
    let found = ServiceScheduling::from_annotations(Some(&map), &mut problems);
    (found, problems)
}

fn resolved(found: Option<&ServiceScheduling>, default: &str) -> String {
    ServiceScheduling::resolve(
        found,
        &Arc::from(default),
        &FlagChoice::default(),
    )
    .to_string()
}

#[test]
fn a_service_without_the_annotations_is_the_nodes() {
    let (found, problems) = annotated(&[("other.io/x", "y")]);
    assert_eq!(found, None);
    assert_eq!(problems, []);
    assert_eq!(resolved(None, "mh"), "mh (mh-port)", "upstream's flags");
}

#[test]
fn our_annotations_set_scheduler_and_the_whole_flag_set() {
    let (found, problems) = annotated(&[
        (ANNOTATION_SCHEDULER, "mh"),
        (ANNOTATION_SCHEDULER_FLAGS, "mh-fallback"),
    ]);
    assert_eq!(problems, []);
    assert_eq!(resolved(found.as_ref(), "rr"), "mh (mh-fallback)");
    // Without flags, the scheduler's defaults; an empty set is no flag.
    let (found, _) = annotated(&[(ANNOTATION_SCHEDULER, "mh")]);
    assert_eq!(resolved(found.as_ref(), "rr"), "mh (mh-port)");
    let (found, _) = annotated(&[
        (ANNOTATION_SCHEDULER, "mh"),
        (ANNOTATION_SCHEDULER_FLAGS, ""),
    ]);
    assert_eq!(resolved(found.as_ref(), "rr"), "mh");
    // Flags alone apply while their scheduler is the node's.
    let (found, problems) =
        annotated(&[(ANNOTATION_SCHEDULER_FLAGS, "sh-fallback,sh-port")]);
    assert_eq!(problems, []);
    assert_eq!(resolved(found.as_ref(), "sh"), "sh (sh-fallback,sh-port)");
    assert_eq!(resolved(found.as_ref(), "rr"), "rr");
}

#[test]
fn kube_routers_annotations_are_honoured_and_ours_win() {
    let (found, problems) = annotated(&[
        (KUBE_ROUTER_SCHEDULER, "mh"),
        (KUBE_ROUTER_SCHEDULER_FLAGS, "flag-1,flag-2"),
    ]);
    assert_eq!(problems, []);
    assert_eq!(resolved(found.as_ref(), "rr"), "mh (mh-fallback,mh-port)");
    let (found, problems) = annotated(&[
        (ANNOTATION_SCHEDULER, "wlc"),
        (KUBE_ROUTER_SCHEDULER, "sh"),
    ]);
    assert_eq!(problems, []);
    assert_eq!(resolved(found.as_ref(), "rr"), "wlc");
    let (found, _) = annotated(&[
        (ANNOTATION_SCHEDULER, "mh"),
        (ANNOTATION_SCHEDULER_FLAGS, "mh-port"),
        (KUBE_ROUTER_SCHEDULER_FLAGS, "flag-1"),
    ]);
    assert_eq!(resolved(found.as_ref(), "rr"), "mh (mh-port)");
}

#[test]
fn a_bad_annotation_is_named_and_left_out() {
    let (found, problems) = annotated(&[
        (ANNOTATION_SCHEDULER, "no such/name"),
        (KUBE_ROUTER_SCHEDULER, "wrr"),
    ]);
    let named: Vec<&str> = problems.iter().map(|p| p.annotation).collect();
    assert_eq!(named, [ANNOTATION_SCHEDULER, KUBE_ROUTER_SCHEDULER]);
    assert_eq!(problems[0].value, "no such/name");
    assert_eq!(resolved(found.as_ref(), "rr"), "rr");
    let (found, problems) = annotated(&[
        (ANNOTATION_SCHEDULER, "rr"),
        (ANNOTATION_SCHEDULER_FLAGS, "mh-port"),
    ]);
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].reason.contains("does not apply"),
        "{:?}",
        problems[0]
    );
    assert_eq!(
        resolved(found.as_ref(), "mh"),
        "rr",
        "the scheduler kept, the flags not"
    );
    let (_, problems) = annotated(&[
        (KUBE_ROUTER_SCHEDULER, "sh"),
        (KUBE_ROUTER_SCHEDULER_FLAGS, "flag-1"),
    ]);
    assert_eq!(problems.len(), 1, "kube-router's flags go with mh only");
    let (_, problems) =
        annotated(&[(ANNOTATION_SCHEDULER, "a-scheduler-name-too-long")]);
    assert_eq!(problems.len(), 1);
}
