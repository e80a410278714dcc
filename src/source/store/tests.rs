use ::kube::runtime::watcher::Event;
use futures::{stream, StreamExt};
use k8s_openapi::{
    api::{
        core::v1::{Node, Service, ServicePort, ServiceSpec},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use pretty_assertions::assert_eq;

use super::*;

fn meta(ns: &str, name: &str, rv: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        namespace: (!ns.is_empty()).then(|| ns.to_string()),
        name: Some(name.to_string()),
        resource_version: rv.map(str::to_string),
        ..Default::default()
    }
}

/// A Service whose port tells versions apart when there is no
/// resourceVersion.
fn svc(name: &str, rv: Option<&str>, port: i32) -> Service {
    Service {
        metadata: meta("default", name, rv),
        spec: Some(ServiceSpec {
            cluster_ip: Some("198.18.0.10".into()),
            ports: Some(vec![ServicePort {
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn slice(name: &str, rv: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: meta("default", name, Some(rv)),
        address_type: "IPv4".into(),
        endpoints: Some(Vec::new()),
        ports: None,
    }
}

fn node(name: &str, rv: &str) -> Node {
    Node {
        metadata: meta("", name, Some(rv)),
        ..Default::default()
    }
}

/// A short description of one change: `+key@v` added, `~key@v->w`
/// updated, `-key@v` deleted, where v is the resourceVersion or, without
/// one, the service's first port.
fn describe(change: &RecordChange) -> String {
    fn one<R>(
        kind: &str,
        (prev, cur): &Change<R>,
        port: impl Fn(&R) -> Option<u16>,
    ) -> String {
        let version =
            |kept: &Kept<R>| match (&kept.resource_version, port(&kept.record))
            {
                (Some(rv), _) => rv.clone(),
                (None, Some(port)) => format!("p{port}"),
                (None, None) => "?".into(),
            };
        let key = |kept: &Kept<R>| match kept.key.namespace.as_str() {
            "" => kept.key.name.to_string(),
            _ => kept.key.to_string(),
        };
        match (prev, cur) {
            (None, Some(c)) => format!("+{kind} {}@{}", key(c), version(c)),
            (Some(p), Some(c)) => {
                format!("~{kind} {}@{}->{}", key(c), version(p), version(c))
            }
            (Some(p), None) => format!("-{kind} {}@{}", key(p), version(p)),
            (None, None) => format!("!{kind} empty change"),
        }
    }
    match change {
        RecordChange::Service(change) => {
            one("svc", change, |r| r.ports.values().map(|p| p.port).min())
        }
        RecordChange::EndpointSlice(change) => one("eps", change, |_| None),
        RecordChange::Node(change) => one("node", change, |_| None),
    }
}

/// Feeds the events through a stream, as the sources deliver them, and
/// returns the changes described, plus readiness at the end.
async fn run(events: Vec<SourceEvent>) -> (Vec<String>, bool) {
    let mut stores = Stores::new("node-a");
    let changes: Vec<String> = stream::iter(events)
        .map(|ev| stores.apply(ev))
        .collect::<Vec<_>>()
        .await
        .iter()
        .flatten()
        .map(describe)
        .collect();
    (changes, stores.ready())
}

fn s(ev: Event<Service>) -> SourceEvent {
    SourceEvent::Service(ev)
}
fn e(ev: Event<EndpointSlice>) -> SourceEvent {
    SourceEvent::EndpointSlice(ev)
}
fn n(ev: Event<Node>) -> SourceEvent {
    SourceEvent::Node(ev)
}

fn synced_services() -> Vec<SourceEvent> {
    vec![s(Event::Init), s(Event::InitDone)]
}

#[tokio::test]
async fn events_become_changes() {
    use Event::*;
    let cases: Vec<(&str, Vec<SourceEvent>, Vec<&str>)> = vec![
        (
            "apply adds, reapply updates, delete removes",
            vec![
                s(Apply(svc("a", Some("1"), 80))),
                s(Apply(svc("a", Some("2"), 81))),
                s(Delete(svc("a", Some("3"), 81))),
            ],
            vec![
                "+svc default/a@1",
                "~svc default/a@1->2",
                "-svc default/a@2",
            ],
        ),
        (
            "an apply of the same resourceVersion changes nothing",
            vec![
                s(Apply(svc("a", Some("1"), 80))),
                s(Apply(svc("a", Some("1"), 80))),
            ],
            vec!["+svc default/a@1"],
        ),
        (
            "without resourceVersion, equal objects change nothing",
            vec![
                s(Apply(svc("a", None, 80))),
                s(Apply(svc("a", None, 80))),
                s(Apply(svc("a", None, 81))),
            ],
            vec!["+svc default/a@p80", "~svc default/a@p80->p81"],
        ),
        (
            "deleting an unknown object changes nothing",
            vec![s(Delete(svc("a", Some("1"), 80)))],
            vec![],
        ),
        (
            "a first list into an empty store adds as it arrives",
            vec![
                s(Init),
                s(InitApply(svc("b", Some("1"), 80))),
                s(InitApply(svc("a", Some("2"), 80))),
                s(InitDone),
            ],
            vec!["+svc default/b@1", "+svc default/a@2"],
        ),
        (
            "a relist yields the diff: removed, changed, added; \
             unchanged is silent",
            vec![
                s(Apply(svc("gone", Some("1"), 80))),
                s(Apply(svc("same", Some("2"), 80))),
                s(Apply(svc("moved", Some("3"), 80))),
                s(Init),
                s(InitApply(svc("same", Some("2"), 80))),
                s(InitApply(svc("moved", Some("4"), 80))),
                s(InitApply(svc("new", Some("5"), 80))),
                s(InitDone),
            ],
            vec![
                "+svc default/gone@1",
                "+svc default/same@2",
                "+svc default/moved@3",
                "-svc default/gone@1",
                "~svc default/moved@3->4",
                "+svc default/new@5",
            ],
        ),
        (
            "a first list restarted by Init takes back what went out",
            vec![
                s(Init),
                s(InitApply(svc("a", Some("1"), 80))),
                s(InitApply(svc("c", Some("3"), 80))),
                s(Init),
                s(InitApply(svc("b", Some("2"), 80))),
                s(InitApply(svc("c", Some("3"), 80))),
                s(InitDone),
            ],
            vec![
                "+svc default/a@1",
                "+svc default/c@3",
                "-svc default/a@1",
                "+svc default/b@2",
            ],
        ),
        (
            "a relist restarted by Init drops what the first one buffered",
            vec![
                s(Apply(svc("a", Some("1"), 80))),
                s(Init),
                s(InitApply(svc("b", Some("2"), 80))),
                s(Init),
                s(InitApply(svc("c", Some("3"), 80))),
                s(InitDone),
            ],
            vec!["+svc default/a@1", "-svc default/a@1", "+svc default/c@3"],
        ),
        (
            "an empty relist deletes everything",
            vec![
                e(Apply(slice("a-1", "1"))),
                n(Apply(node("n1", "1"))),
                e(Init),
                e(InitDone),
                n(Init),
                n(InitDone),
            ],
            vec![
                "+eps default/a-1@1",
                "+node n1@1",
                "-eps default/a-1@1",
                "-node n1@1",
            ],
        ),
        (
            "kinds are kept apart: same name, different stores",
            vec![
                s(Apply(svc("x", Some("1"), 80))),
                e(Apply(slice("x", "1"))),
                e(Delete(slice("x", "1"))),
            ],
            vec!["+svc default/x@1", "+eps default/x@1", "-eps default/x@1"],
        ),
    ];
    for (name, events, expected) in cases {
        let (changes, _) = run(events).await;
        assert_eq!(changes, expected, "{name}");
    }
}

/// The first list's objects reach the trackers while it is still
/// arriving, yet readiness waits for its end.
#[test]
fn a_first_list_goes_out_object_by_object_and_is_ready_at_its_end() {
    let mut stores = Stores::new("node-a");
    let out = |stores: &mut Stores, ev| -> Vec<String> {
        stores.apply(ev).iter().map(describe).collect()
    };
    assert!(out(&mut stores, s(Event::Init)).is_empty());
    assert!(out(&mut stores, e(Event::Init)).is_empty());
    let first = out(&mut stores, s(Event::InitApply(svc("a", Some("1"), 80))));
    assert_eq!(first, ["+svc default/a@1"]);
    let eps = out(&mut stores, e(Event::InitApply(slice("a-1", "2"))));
    assert_eq!(eps, ["+eps default/a-1@2"]);
    assert!(out(&mut stores, s(Event::InitDone)).is_empty());
    assert!(!stores.ready(), "the slices are still listing");
    assert!(out(&mut stores, e(Event::InitDone)).is_empty());
    assert!(stores.ready());
    // Later relists are diffed as before: nothing new, nothing out.
    assert!(out(&mut stores, s(Event::Init)).is_empty());
    let again = out(&mut stores, s(Event::InitApply(svc("a", Some("1"), 80))));
    assert!(again.is_empty());
    assert!(out(&mut stores, s(Event::InitDone)).is_empty());
}

#[tokio::test]
async fn objects_without_a_name_are_ignored() {
    let mut nameless = svc("x", Some("1"), 80);
    nameless.metadata.name = None;
    let (changes, _) = run(vec![
        s(Event::Apply(nameless.clone())),
        s(Event::Init),
        s(Event::InitApply(nameless.clone())),
        s(Event::InitDone),
        s(Event::Delete(nameless)),
    ])
    .await;
    assert_eq!(changes, Vec::<String>::new());
}

#[tokio::test]
async fn ready_needs_both_services_and_slices_synced_once() {
    let slices_synced = vec![e(Event::Init), e(Event::InitDone)];
    let cases: Vec<(&str, Vec<SourceEvent>, bool)> = vec![
        ("nothing yet", vec![], false),
        ("services only", synced_services(), false),
        ("slices only", slices_synced.clone(), false),
        (
            "applies are not a sync",
            vec![
                s(Event::Apply(svc("a", Some("1"), 80))),
                e(Event::Apply(slice("a-1", "1"))),
            ],
            false,
        ),
        (
            "a relist in progress is not a sync",
            vec![s(Event::Init), e(Event::Init), e(Event::InitDone)],
            false,
        ),
        (
            "both",
            [synced_services(), slices_synced.clone()].concat(),
            true,
        ),
        (
            "a later restart keeps readiness",
            [
                synced_services(),
                slices_synced.clone(),
                vec![s(Event::Init)],
            ]
            .concat(),
            true,
        ),
        (
            "nodes are not waited for",
            [synced_services(), slices_synced].concat(),
            true,
        ),
    ];
    for (name, events, expected) in cases {
        let (_, ready) = run(events).await;
        assert_eq!(ready, expected, "{name}");
    }
}

#[test]
fn store_reports_contents_and_sync() {
    let mut store = Store::<Service>::new("node-a".into());
    assert!(!store.is_synced());
    store.apply(Event::Init);
    store.apply(Event::InitApply(svc("a", Some("1"), 80)));
    assert_eq!(store.len(), 1, "a first list is taken in as it comes");
    assert!(!store.is_synced());
    store.apply(Event::InitDone);
    assert!(store.is_synced());
    assert_eq!(store.len(), 1);
    store.apply(Event::Init);
    store.apply(Event::InitApply(svc("b", Some("2"), 80)));
    assert_eq!(store.len(), 1, "a relist is invisible until InitDone");
    store.apply(Event::InitApply(svc("a", Some("1"), 80)));
    store.apply(Event::InitDone);
    assert_eq!(store.len(), 2);
    let got = store.get(&NamespacedName::new("default", "a"));
    assert_eq!(
        got.map(|s| s.resource_version.clone()),
        Some(Some("1".into()))
    );
}

#[test]
fn delete_hands_on_the_stored_object() {
    let mut store = Store::<Service>::new("node-a".into());
    store.apply(Event::Apply(svc("a", Some("1"), 80)));
    // A delete event may carry a later state than the one handed on; the
    // trackers must get back exactly what they were given.
    let changes = store.apply(Event::Delete(svc("a", Some("9"), 99)));
    assert_eq!(changes.len(), 1);
    let (prev, cur) = &changes[0];
    let first = Store::<Service>::new("node-a".into())
        .apply(Event::Apply(svc("a", Some("1"), 80)))
        .remove(0)
        .1;
    assert_eq!(prev, &first);
    assert!(cur.is_none());
}
