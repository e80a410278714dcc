//! The server side of `NodeView.Watch` for a server that sends many
//! clients the same message: a message may be handed over already
//! encoded, so that it is encoded once, not once per client.
//!
//! The generated `node_view_server` takes only `v1::ViewUpdate`s and
//! encodes each one it sends. [`NodeViewServer`] serves the same method,
//! on the same path and in the same encoding, with [`Outgoing`]
//! messages; a client cannot tell the two apart.

use std::{
    convert::Infallible,
    sync::Arc,
    task::{Context, Poll},
};

use prost::{
    bytes::{BufMut as _, Bytes},
    Message as _,
};
use tonic::{
    body::Body as ResponseBody,
    codec::{BufferSettings, Codec, EncodeBuf, Encoder},
    codegen::{http, tokio_stream::Stream, Body, BoxFuture, Service, StdError},
    server::{Grpc, NamedService, ServerStreamingService},
    Request, Response, Status,
};

use crate::v1;

/// One message of a watch: made for this client, or the bytes of a
/// `v1::ViewUpdate` encoded once for many.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    Message(v1::ViewUpdate),
    Encoded(Bytes),
}

impl Outgoing {
    /// Encodes `message` for sending to many clients.
    pub fn encode(message: &v1::ViewUpdate) -> Bytes {
        Bytes::from(message.encode_to_vec())
    }

    /// Its size on the wire, without gRPC's frame.
    pub fn encoded_len(&self) -> usize {
        match self {
            Outgoing::Message(message) => message.encoded_len(),
            Outgoing::Encoded(bytes) => bytes.len(),
        }
    }
}

/// The `NodeView` service, with [`Outgoing`] messages.
#[tonic::async_trait]
pub trait NodeView: Send + Sync + 'static {
    type WatchStream: Stream<Item = Result<Outgoing, Status>> + Send + 'static;

    async fn watch(
        &self,
        request: Request<v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status>;
}

/// Serves a [`NodeView`] where the generated server would serve the
/// generated trait.
#[derive(Debug)]
pub struct NodeViewServer<T> {
    inner: Arc<T>,
    max_decoding_message_size: Option<usize>,
}

impl<T> Clone for NodeViewServer<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            max_decoding_message_size: self.max_decoding_message_size,
        }
    }
}

impl<T: NodeView> NodeViewServer<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner: Arc::new(inner),
            max_decoding_message_size: None,
        }
    }

    /// The largest request read (tonic's default: 4 MiB).
    #[must_use]
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.max_decoding_message_size = Some(limit);
        self
    }
}

impl<T> NamedService for NodeViewServer<T> {
    const NAME: &'static str = v1::node_view_server::SERVICE_NAME;
}

/// The path gRPC gives `NodeView.Watch`.
const WATCH_PATH: &str = "/kubeipvsproxy.nodeview.v1.NodeView/Watch";

impl<T, B> Service<http::Request<B>> for NodeViewServer<T>
where
    T: NodeView,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != WATCH_PATH {
            return Box::pin(async {
                Ok(Status::unimplemented("").into_http())
            });
        }
        let watch = Watch(self.inner.clone());
        let max = self.max_decoding_message_size;
        Box::pin(async move {
            let mut grpc = Grpc::new(OutgoingCodec)
                .apply_max_message_size_config(max, None);
            Ok(grpc.server_streaming(watch, request).await)
        })
    }
}

struct Watch<T>(Arc<T>);

impl<T: NodeView> ServerStreamingService<v1::WatchRequest> for Watch<T> {
    type Response = Outgoing;
    type ResponseStream = T::WatchStream;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<v1::WatchRequest>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { inner.watch(request).await })
    }
}

/// Writes an [`Outgoing`] as protobuf, reads a `v1::WatchRequest`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutgoingCodec;

impl Codec for OutgoingCodec {
    type Encode = Outgoing;
    type Decode = v1::WatchRequest;
    type Encoder = OutgoingCodec;
    type Decoder = tonic_prost::ProstDecoder<v1::WatchRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        OutgoingCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::new(BufferSettings::default())
    }
}

impl Encoder for OutgoingCodec {
    type Item = Outgoing;
    type Error = Status;

    fn encode(
        &mut self,
        item: Outgoing,
        buf: &mut EncodeBuf<'_>,
    ) -> Result<(), Status> {
        match item {
            Outgoing::Message(message) => message
                .encode(buf)
                .map_err(|e| Status::internal(e.to_string())),
            Outgoing::Encoded(bytes) => {
                buf.put_slice(&bytes);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes encoded once read as the message they were made from, and
    /// the same as the message encoded on its own.
    #[test]
    fn encoded_bytes_are_the_message() {
        let message = v1::ViewUpdate {
            full: false,
            revision: 42,
            synced: true,
            instance: "api-side".into(),
            ..Default::default()
        };
        let bytes = Outgoing::encode(&message);
        assert_eq!(bytes, message.encode_to_vec());
        assert_eq!(Outgoing::Encoded(bytes.clone()).encoded_len(), bytes.len());
        assert_eq!(v1::ViewUpdate::decode(bytes).unwrap(), message);
    }
}
