//! Requests on the destinations of one service:
//! `handle.dest(&svc).add(&dest).execute()`.

use futures::{Stream, StreamExt};

use crate::dest::Destination;
use crate::{
    error::{Error, Operation},
    handle::request::{dump, WriteRequest},
    handle::Handle,
    message::IpvsMessage,
    service::ServiceKey,
};

/// Requests on the destinations of one service; from [`Handle::dest`].
#[derive(Clone, Debug)]
pub struct DestHandle {
    handle: Handle,
    service: ServiceKey,
}

impl DestHandle {
    pub(crate) fn new(handle: Handle, service: ServiceKey) -> Self {
        Self { handle, service }
    }

    fn object(&self, dest: &Destination) -> String {
        format!("{dest} in {}", self.service)
    }

    /// Add a destination (`ipvsadm -a`); EEXIST if it exists, ESRCH if
    /// the service is missing.
    pub fn add(&self, dest: &Destination) -> WriteRequest {
        WriteRequest::new(
            self.handle.clone(),
            IpvsMessage::new_dest(&self.service, dest),
            Operation::AddDest,
            self.object(dest),
        )
    }

    /// Replace a destination's settings (`ipvsadm -e`); ENOENT if missing.
    pub fn set(&self, dest: &Destination) -> WriteRequest {
        WriteRequest::new(
            self.handle.clone(),
            IpvsMessage::set_dest(&self.service, dest),
            Operation::SetDest,
            self.object(dest),
        )
    }

    /// Delete a destination (`ipvsadm -d`); only its address and port
    /// matter. ENOENT if missing.
    pub fn del(&self, dest: &Destination) -> WriteRequest {
        WriteRequest::new(
            self.handle.clone(),
            IpvsMessage::del_dest(&self.service, dest),
            Operation::DelDest,
            self.object(dest),
        )
    }

    /// Dump the service's destinations. The kernel answers for a missing
    /// service with an empty dump, not an error: use
    /// [`ServiceHandle::get`](crate::ServiceHandle::get) to tell the two
    /// apart.
    pub fn list(&self) -> DestListRequest {
        DestListRequest {
            handle: self.handle.clone(),
            service: self.service,
        }
    }
}

/// Dump the destinations of one service; from [`DestHandle::list`].
#[derive(Debug)]
#[must_use = "a request does nothing until executed"]
pub struct DestListRequest {
    handle: Handle,
    service: ServiceKey,
}

impl DestListRequest {
    /// A destination that does not decode is an `Err` item; the rest
    /// follow.
    pub fn execute(
        self,
    ) -> impl Stream<Item = Result<Destination, Error>> + Send + Unpin {
        let object = format!("destinations of {}", self.service);
        let family = self.service.family();
        dump(
            self.handle,
            IpvsMessage::dump_dests(&self.service),
            Operation::ListDests,
            object.clone(),
        )
        .map(move |reply| {
            reply.and_then(|message| {
                message
                    .to_destination(family)
                    .map_err(Error::decode(Operation::ListDests, &object))
            })
        })
    }
}
