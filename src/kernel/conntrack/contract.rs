//! Scenarios every [`Conntrack`] implementation passes. Flows cannot be
//! created through the trait, so the caller puts them in first: the
//! unit tests into the model, the guest test with `conntrack -I`.

use std::net::SocketAddr;

use super::{Conntrack, Flow, FlowTuple};
use crate::kernel::ErrorKind;

/// A NATed UDP flow: `client` sent to `frontend`, `endpoint` answers.
pub fn nat_flow(client: &str, frontend: &str, endpoint: &str) -> Flow {
    let parse = |s: &str| -> SocketAddr {
        s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    };
    let (client, frontend, endpoint) =
        (parse(client), parse(frontend), parse(endpoint));
    Flow {
        original: FlowTuple {
            src: client,
            dst: frontend,
        },
        reply: FlowTuple {
            src: endpoint,
            dst: client,
        },
    }
}

/// The flows the guest test inserts before running the scenario.
pub fn seeded_flows() -> [Flow; 3] {
    [
        nat_flow("198.18.9.1:40001", "198.18.9.100:53", "198.19.9.1:5353"),
        nat_flow("198.18.9.1:40002", "198.18.9.100:53", "198.19.9.2:5353"),
        nat_flow(
            "[2001:db8::9:1]:40003",
            "[2001:db8::9:64]:53",
            "[2001:db8::19:1]:5353",
        ),
    ]
}

/// The dump shows the seeded flows with both tuples; deleting by the
/// original tuple removes exactly that flow; deleting it again is
/// NotFound; the others stay until deleted.
pub async fn dump_and_delete<K: Conntrack>(k: &mut K) {
    let [a, b, c] = seeded_flows();
    let dumped = k.dump_udp().await.expect("dump");
    for f in [a, b, c] {
        assert!(dumped.contains(&f), "{f} missing from {dumped:?}");
    }

    let results = k.delete(&[a, c]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let dumped = k.dump_udp().await.expect("dump");
    assert!(!dumped.contains(&a) && !dumped.contains(&c), "{dumped:?}");
    assert!(dumped.contains(&b), "{dumped:?}");

    let again = k.delete(&[a, b]).await;
    let kinds: Vec<_> = again
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind))
        .collect();
    assert_eq!(kinds, [Some(ErrorKind::NotFound), None], "{again:?}");
    if let Some(Err(e)) = again.first() {
        assert!(e.object.contains("198.18.9.100:53"), "{e}");
    }
    let dumped = k.dump_udp().await.expect("dump");
    assert!(!dumped.iter().any(|f| [a, b, c].contains(f)), "{dumped:?}");
}
