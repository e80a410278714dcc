use ::kube::runtime::watcher::{Error, Event};
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use pretty_assertions::assert_eq;

use super::*;

#[test]
fn selectors_follow_the_api_servers_release() {
    let split = selectors(None, Release::new(1, 36)).unwrap();
    assert_eq!(split.services, "!service.kubernetes.io/service-proxy-name");
    assert_eq!(split.endpoint_slices, "!service.kubernetes.io/headless");
    assert_eq!(selectors(None, Release::NEWEST).unwrap(), split);
    let named = selectors(Some("ours"), Release::new(1, 37)).unwrap();
    assert_eq!(
        named.services,
        "service.kubernetes.io/service-proxy-name=ours"
    );
    assert_eq!(named.endpoint_slices, "!service.kubernetes.io/headless");
    // 1.35 and before: both labels on both kinds, as that release's own
    // e2e suite expects of a headless-labelled Service.
    let combined = selectors(None, Release::new(1, 35)).unwrap();
    assert_eq!(combined.services, label_selector(None).unwrap());
    assert_eq!(combined.endpoint_slices, label_selector(None).unwrap());
    assert_eq!(
        selectors(Some("a,b"), Release::NEWEST),
        Err(SelectorError::InvalidServiceProxyName("a,b".into()))
    );
}

/// A label selector of `!key` and `key=value` terms, as the API server
/// reads the ones [`selectors`] writes.
fn selects(selector: &str, labels: &Labels) -> bool {
    selector
        .split(',')
        .all(|term| match term.strip_prefix('!') {
            Some(key) => !labels.contains_key(key),
            None => {
                let (key, value) = term.split_once('=').unwrap();
                labels.get(key).map(String::as_str) == Some(value)
            }
        })
}

#[test]
fn admission_lets_through_what_the_selectors_would() {
    let label_sets: Vec<Labels> = [
        vec![],
        vec![(HEADLESS_LABEL, "")],
        vec![(SERVICE_PROXY_NAME_LABEL, "ours")],
        vec![(SERVICE_PROXY_NAME_LABEL, "other")],
        vec![(SERVICE_PROXY_NAME_LABEL, "ours"), (HEADLESS_LABEL, "")],
        vec![("app", "web")],
    ]
    .into_iter()
    .map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    })
    .collect();
    let mut admitted = 0;
    for release in [Release::new(1, 35), Release::new(1, 36), Release::NEWEST] {
        for name in [None, Some(""), Some("ours")] {
            let admission = Admission::new(name, release);
            let selectors = selectors(name, release).unwrap();
            for labels in &label_sets {
                let service = admission.service(Some(labels));
                let slice = admission.endpoint_slice(Some(labels));
                assert_eq!(
                    service,
                    selects(&selectors.services, labels),
                    "Service at {release}, name {name:?}, {labels:?}"
                );
                assert_eq!(
                    slice,
                    selects(&selectors.endpoint_slices, labels),
                    "EndpointSlice at {release}, name {name:?}, {labels:?}"
                );
                admitted += usize::from(service) + usize::from(slice);
            }
            assert_eq!(
                admission.service(None),
                selects(&selectors.services, &Labels::new())
            );
        }
    }
    // Neither everything nor nothing.
    assert!(admitted > 0 && admitted < 3 * 3 * label_sets.len() * 2);
    // The split as upstream's 1.36: a headless-labelled Service is read,
    // its slices are not.
    let newest = Admission::new(None, Release::NEWEST);
    assert!(newest.service(Some(&label_sets[1])));
    assert!(!newest.endpoint_slice(Some(&label_sets[1])));
    let old = Admission::new(None, Release::new(1, 35));
    assert!(!old.service(Some(&label_sets[1])));
}

#[test]
fn releases_read_as_the_api_server_writes_them() {
    assert_eq!(Release::parse("1", "37"), Some(Release::new(1, 37)));
    assert_eq!(Release::parse("1", "35+"), Some(Release::new(1, 35)));
    assert_eq!(Release::parse("1", ""), None);
    assert_eq!(Release::parse("", "37"), None);
    assert!(Release::new(1, 35) < Release::new(1, 36));
    assert!(Release::new(2, 0) > Release::NEWEST);
    assert_eq!(Release::new(1, 37).to_string(), "1.37");
}

#[test]
fn label_selector_follows_upstream() {
    let long = "a".repeat(64);
    let max = "a".repeat(63);
    let cases: Vec<(Option<&str>, Result<String, SelectorError>)> = vec![
        (
            None,
            Ok("!service.kubernetes.io/service-proxy-name,\
                !service.kubernetes.io/headless"
                .into()),
        ),
        (
            Some(""),
            Ok("!service.kubernetes.io/service-proxy-name,\
                !service.kubernetes.io/headless"
                .into()),
        ),
        (
            Some("ipvs-rs"),
            Ok("service.kubernetes.io/service-proxy-name=ipvs-rs,\
                !service.kubernetes.io/headless"
                .into()),
        ),
        (
            Some("a.b_c-9"),
            Ok("service.kubernetes.io/service-proxy-name=a.b_c-9,\
                !service.kubernetes.io/headless"
                .into()),
        ),
        (
            Some(&max),
            Ok(format!(
                "service.kubernetes.io/service-proxy-name={max},\
                 !service.kubernetes.io/headless"
            )),
        ),
        (
            Some(&long),
            Err(SelectorError::InvalidServiceProxyName(long.clone())),
        ),
        (
            Some("-lead"),
            Err(SelectorError::InvalidServiceProxyName("-lead".into())),
        ),
        (
            Some("trail."),
            Err(SelectorError::InvalidServiceProxyName("trail.".into())),
        ),
        // A comma would smuggle in another requirement.
        (
            Some("a,b"),
            Err(SelectorError::InvalidServiceProxyName("a,b".into())),
        ),
        (
            Some("a b"),
            Err(SelectorError::InvalidServiceProxyName("a b".into())),
        ),
    ];
    for (name, expected) in cases {
        assert_eq!(label_selector(name), expected, "{name:?}");
    }
}

#[test]
fn node_field_selector_names_our_node() {
    let cases: Vec<(&str, Result<String, SelectorError>)> = vec![
        ("worker-1", Ok("metadata.name=worker-1".into())),
        (
            "ip-10-0-0-1.ec2.internal",
            Ok("metadata.name=ip-10-0-0-1.ec2.internal".into()),
        ),
        ("a=b,c", Ok(r"metadata.name=a\=b\,c".into())),
        ("", Err(SelectorError::EmptyNodeName)),
    ];
    for (node, expected) in cases {
        assert_eq!(node_field_selector(node), expected, "{node:?}");
    }
}

fn named(name: &str) -> Service {
    let mut svc = Service::default();
    svc.metadata.name = Some(name.into());
    svc
}

#[tokio::test]
async fn errors_are_dropped_and_the_stream_goes_on() {
    let input: Vec<Result<Event<Service>, Error>> = vec![
        Ok(Event::Init),
        Err(Error::NoResourceVersion),
        Ok(Event::InitApply(named("a"))),
        Ok(Event::InitDone),
        Err(Error::NoResourceVersion),
        Err(Error::NoResourceVersion),
        Ok(Event::Apply(named("b"))),
        Ok(Event::Delete(named("a"))),
    ];
    let got: Vec<String> = log_errors("Service", stream::iter(input))
        .map(|ev| match ev {
            Event::Init => "init".to_string(),
            Event::InitApply(s) => {
                format!("init-apply {}", s.metadata.name.unwrap_or_default())
            }
            Event::InitDone => "init-done".to_string(),
            Event::Apply(s) => {
                format!("apply {}", s.metadata.name.unwrap_or_default())
            }
            Event::Delete(s) => {
                format!("delete {}", s.metadata.name.unwrap_or_default())
            }
        })
        .collect()
        .await;
    assert_eq!(
        got,
        vec!["init", "init-apply a", "init-done", "apply b", "delete a"]
    );
}
