use super::{contract, ModelIpsets};

macro_rules! model_contract {
    ($($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                contract::$scenario(&mut ModelIpsets::new()).await;
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
        flush_and_destroy,
        failures_stay_in_place,
        dump_only_prefix,
        large_batch,
    );
}
