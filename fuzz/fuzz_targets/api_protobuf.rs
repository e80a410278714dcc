#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    assert!(kube_ipvs_proxy::fuzz::run("api_protobuf", data));
});
