//! A tower layer around the kube client's HTTP stack that reports each
//! request as a [`RestClientRequest`] (the `rest_client_*` metrics
//! kube-proxy exports from client-go). Added with kube's
//! `ClientBuilder::with_layer`, outside kube's own layers, so it sees
//! every request the watchers and the event recorder make, retries
//! included.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use http::{Request, Response};
use tower::{Layer, Service};

use crate::telemetry::{events::InternalEvent, rest_client::RestClientRequest};

#[cfg(test)]
mod tests;

/// Counts and times requests to the API server at `host` (`host:port`,
/// the `host` label).
#[derive(Debug, Clone)]
pub struct RestClientMetricsLayer {
    host: Arc<str>,
}

impl RestClientMetricsLayer {
    pub fn new(host: impl Into<Arc<str>>) -> Self {
        Self { host: host.into() }
    }

    /// The label client-go uses: the API server URL's `host:port`.
    pub fn for_url(url: &http::Uri) -> Self {
        Self::new(url.authority().map_or("", |a| a.as_str()))
    }
}

impl<S> Layer<S> for RestClientMetricsLayer {
    type Service = RestClientMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RestClientMetrics {
            inner,
            host: Arc::clone(&self.host),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RestClientMetrics<S> {
    inner: S,
    host: Arc<str>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<Request<B>> for RestClientMetrics<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().clone();
        let host = Arc::clone(&self.host);
        let start = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            RestClientRequest {
                method: method.as_str(),
                host: &host,
                status: result.as_ref().ok().map(|r| r.status().as_u16()),
                duration: start.elapsed(),
            }
            .emit();
            result
        })
    }
}
