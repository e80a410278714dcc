//! What one client may cost the API side. Every node's proxy can reach
//! its port, and so can anything else in the cluster: before a client
//! has shown who it is, and after, it gets a bounded share of sockets,
//! streams, buffers, TokenReviews and time, so that a broken or hostile
//! client cannot slow the views of the others.

use std::{
    collections::HashMap,
    io,
    net::IpAddr,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;
use tracing::warn;

use crate::telemetry::API_SIDE_REFUSED_TOTAL;

/// A node watches one stream; a few more cover a reconnect racing the
/// end of the old stream. Past this, a client's further streams wait
/// (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 4;

/// Connections one address may hold at once. A node needs one; nodes
/// behind one NAT address (rare inside a cluster) share the rest.
pub const MAX_CONNECTIONS_PER_PEER: usize = 16;

/// Time a client has for the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Time from a watch request to its answer: the TokenReview, when the
/// client shows a token, is in it.
pub const AUTHORIZE_TIMEOUT: Duration = Duration::from_secs(15);

/// A request's headers: a bearer token is about 1 KiB.
pub const MAX_HEADER_BYTES: u32 = 16 * 1024;

/// Pings on a quiet connection, and how long the answer may take: a node
/// that vanished (powered off, partitioned) frees its watch within a
/// minute rather than when TCP gives up.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Time a message may wait for a node to read it. A node that stops
/// reading for longer has its watch ended; it resumes from its revision
/// when it reads again. Generous: a node applying a full state of a large
/// cluster does not read meanwhile.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(300);

/// The same, for a node in the middle of a walk of its view (its first
/// view, mostly). It holds one of the few walk permits meanwhile, and a
/// node that stops reading then, or a client that opens many streams
/// and reads none, would keep every other node from its first view: its
/// watch ends sooner. A node reads a walk's parts as they come; it only
/// applies the state once the last part is in.
pub const WALK_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// TokenReviews the API side asks the API server for, at most, per
/// second and in a burst: a flood of distinct bogus tokens costs the API
/// server this much and no more. A node's token is reviewed once a
/// minute at most (its answer is remembered), so honest nodes
/// reconnecting all at once ask for one review each.
pub const TOKEN_REVIEWS_PER_SECOND: f64 = 20.0;
pub const TOKEN_REVIEW_BURST: f64 = 100.0;

/// Why a client was refused, as the metric labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    ConnectionsPerPeer,
    TokenReviewRate,
    Unauthenticated,
    PermissionDenied,
    InvalidRequest,
    /// A watch ended because the node did not read.
    Stalled,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::ConnectionsPerPeer => "connections_per_peer",
            Refusal::TokenReviewRate => "token_review_rate",
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::PermissionDenied => "permission_denied",
            Refusal::InvalidRequest => "invalid_request",
            Refusal::Stalled => "stalled",
        }
    }

    pub fn count(self) {
        metrics::counter!(API_SIDE_REFUSED_TOTAL, "reason" => self.as_str())
            .increment(1);
    }
}

/// A token bucket: `per_second` tokens a second, `burst` at most.
#[derive(Debug)]
pub struct RateLimit {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl RateLimit {
    pub fn new(per_second: f64, burst: f64) -> Self {
        Self {
            per_second,
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Takes a token at `now`, if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens =
                (self.tokens + elapsed * self.per_second).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

type Counts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A connection counted against its peer's share while it lives.
#[derive(Debug)]
pub struct Counted<IO> {
    io: IO,
    peer: Option<IpAddr>,
    counts: Counts,
}

impl<IO> Drop for Counted<IO> {
    fn drop(&mut self) {
        let Some(peer) = self.peer else {
            return;
        };
        let mut counts =
            self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&peer);
            }
        }
    }
}

/// The peer address a connection comes from, if it has one (a Unix
/// socket's peers are guarded by the file mode instead).
pub trait PeerAddress {
    fn peer_ip(&self) -> Option<IpAddr>;
}

impl PeerAddress for tokio::net::TcpStream {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.peer_addr().ok().map(|a| a.ip())
    }
}

/// Accepted connections, each peer address held to `max` at once:
/// further connections from it are closed as they arrive.
pub fn per_peer<S, IO>(
    incoming: S,
    max: usize,
) -> impl Stream<Item = io::Result<Counted<IO>>>
where
    S: Stream<Item = io::Result<IO>>,
    IO: PeerAddress,
{
    let counts: Counts = Arc::default();
    incoming.filter_map(move |accepted| {
        let counts = counts.clone();
        async move {
            let io = match accepted {
                Ok(io) => io,
                Err(e) => return Some(Err(e)),
            };
            let peer = io.peer_ip();
            if let Some(peer) = peer {
                let mut held = counts.lock().unwrap_or_else(PoisonError::into_inner);
                let n = held.entry(peer).or_default();
                if *n >= max {
                    drop(held);
                    Refusal::ConnectionsPerPeer.count();
                    warn!(%peer, max, "refused a connection: the peer holds its share");
                    return None;
                }
                *n += 1;
            }
            Some(Ok(Counted { io, peer, counts }))
        }
    })
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Connected> Connected for Counted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_gives_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut limit = RateLimit::new(2.0, 3.0);
        let taken = (0..10).filter(|_| limit.try_take(start)).count();
        assert_eq!(taken, 3, "the burst");
        assert!(!limit.try_take(start + Duration::from_millis(400)));
        assert!(limit.try_take(start + Duration::from_millis(500)));
        assert!(!limit.try_take(start + Duration::from_millis(600)));
        // A long quiet time refills up to the burst, no more.
        let later = start + Duration::from_secs(3600);
        let taken = (0..10).filter(|_| limit.try_take(later)).count();
        assert_eq!(taken, 3);
    }
}
