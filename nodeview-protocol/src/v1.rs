//! Version 1 of the protocol, as generated from `proto/nodeview.proto`.

tonic::include_proto!("kubeipvsproxy.nodeview.v1");
