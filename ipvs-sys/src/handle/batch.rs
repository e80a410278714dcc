//! Many writes in flight at once.
//!
//! Waiting for each acknowledgement before sending the next request costs a
//! round trip through the connection task per operation; a cold sync of
//! thousands of services spends most of its time there. A [`Batch`] queues
//! up to [`Batch::window`] requests before reading any acknowledgement,
//! then keeps the window full, and still checks every acknowledgement.

use futures::{stream, StreamExt};

use crate::{
    dest::Destination,
    error::Error,
    handle::request::WriteRequest,
    handle::Handle,
    service::{Service, ServiceKey},
};

/// How many requests may wait for their acknowledgement at once, by
/// default. Every outstanding ack occupies the socket's receive buffer
/// until the connection task reads it; a buffer overrun would lose acks,
/// so the window stays well under what the default buffer holds.
pub const DEFAULT_WINDOW: usize = 128;

/// A list of writes sent together; from [`Handle::batch`].
///
/// ```no_run
/// # async fn f(handle: ipvs_sys::Handle, svc: ipvs_sys::Service,
/// #            dests: Vec<ipvs_sys::Destination>) -> Result<(), ipvs_sys::Error> {
/// let mut batch = handle.batch();
/// batch.add_service(&svc);
/// for dest in &dests {
///     batch.add_dest(&svc, dest);
/// }
/// for (i, result) in batch.execute().await?.into_iter().enumerate() {
///     if let Err(err) = result {
///         eprintln!("operation {i}: {err}");
///     }
/// }
/// # Ok(()) }
/// ```
///
/// Requests are sent in order, and the kernel handles them in order, so a
/// destination added after its service in the same batch finds it.
#[derive(Debug)]
#[must_use = "a batch does nothing until executed"]
pub struct Batch {
    handle: Handle,
    requests: Vec<WriteRequest>,
    window: usize,
}

impl Batch {
    pub(crate) fn new(handle: Handle) -> Self {
        Self {
            handle,
            requests: Vec::new(),
            window: DEFAULT_WINDOW,
        }
    }

    /// At most `window` requests awaiting their acknowledgement (min 1).
    pub fn window(mut self, window: usize) -> Self {
        self.window = window.max(1);
        self
    }

    /// Queue any write request (from `handle.service().add(..)` and so on).
    pub fn push(&mut self, request: WriteRequest) -> &mut Self {
        self.requests.push(request);
        self
    }

    /// Queue adding a virtual service (`ipvsadm -A`).
    pub fn add_service(&mut self, service: &Service) -> &mut Self {
        self.push(self.handle.service().add(service))
    }

    /// Queue changing a virtual service's scheduler, flags or persistence
    /// (`ipvsadm -E`).
    pub fn set_service(&mut self, service: &Service) -> &mut Self {
        self.push(self.handle.service().set(service))
    }

    /// Queue deleting a virtual service and its destinations (`ipvsadm -D`).
    pub fn del_service(
        &mut self,
        service: impl AsRef<ServiceKey>,
    ) -> &mut Self {
        self.push(self.handle.service().del(service))
    }

    /// Queue adding a destination to a service (`ipvsadm -a`).
    pub fn add_dest(
        &mut self,
        service: impl AsRef<ServiceKey>,
        dest: &Destination,
    ) -> &mut Self {
        self.push(self.handle.dest(service).add(dest))
    }

    /// Queue changing a destination's weight, forwarding method or
    /// thresholds (`ipvsadm -e`).
    pub fn set_dest(
        &mut self,
        service: impl AsRef<ServiceKey>,
        dest: &Destination,
    ) -> &mut Self {
        self.push(self.handle.dest(service).set(dest))
    }

    /// Queue deleting a destination from a service (`ipvsadm -d`).
    pub fn del_dest(
        &mut self,
        service: impl AsRef<ServiceKey>,
        dest: &Destination,
    ) -> &mut Self {
        self.push(self.handle.dest(service).del(dest))
    }

    #[cfg(test)]
    pub(crate) fn requests(&self) -> &[WriteRequest] {
        &self.requests
    }

    /// How many requests are queued.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Send everything and return one result per request, in the order
    /// they were queued. The outer error is for what stops the whole batch
    /// (IPVS unavailable); each operation's own failure is in its slot, and
    /// the operations after it still run.
    pub async fn execute(self) -> Result<Vec<Result<(), Error>>, Error> {
        if self.requests.is_empty() {
            return Ok(Vec::new());
        }
        let family_id = self.handle.family_id().await?;
        let genl = self.handle.genl();
        let results = stream::iter(self.requests)
            .map(|request| {
                let mut genl = genl.clone();
                async move { request.send_and_check(&mut genl, family_id).await }
            })
            .buffered(self.window)
            .collect()
            .await;
        Ok(results)
    }
}
