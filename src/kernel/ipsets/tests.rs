use super::{contract, IpsetsModel};

macro_rules! model_contract {
    ($($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                contract::$scenario(&mut IpsetsModel::new()).await;
            }
        )*
    };
}

mod model_contract {
    use super::*;

    model_contract!(
        create_list_destroy,
        add_delete_entries,
        rejected_entries,
        non_empty_sets_are_destroyed,
        failures_stay_in_place,
        dump_only_prefix,
        large_batch,
        element_kinds_must_match_the_type,
    );
}

/// The model's stand-in for an iptables rule using a set: the kernel's
/// busy error (checked against the kernel in tests/kernel_ipsets.rs).
#[tokio::test]
async fn referenced_set_is_busy() {
    use super::{IpsetOp, Ipsets};
    use crate::{desired::SetKind, kernel::ErrorKind};

    let mut k = IpsetsModel::new();
    let spec = contract::spec(SetKind::ClusterIp, false);
    let name = spec.name.clone();
    assert!(k.apply(&[IpsetOp::Create(spec)]).await[0].is_ok());
    k.reference(&name);
    let busy = k.apply(&[IpsetOp::Destroy(name.clone())]).await;
    match busy.as_slice() {
        [Err(e)] => {
            assert_eq!((e.kind, e.errno), (ErrorKind::Other, Some(4100)));
            assert_eq!(e.object, name);
        }
        other => panic!("expected busy, got {other:?}"),
    }
    k.unreference(&name);
    let gone = k.apply(&[IpsetOp::Destroy(name)]).await;
    assert!(gone.iter().all(Result::is_ok), "{gone:?}");
    assert!(k.sets().is_empty());
}
