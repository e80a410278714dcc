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
