//! Requests on virtual services: `handle.service().add(&svc).execute()`.

use futures::{Stream, StreamExt};

use crate::service::{Service, ServiceKey};
use crate::{
    error::{Error, Operation},
    handle::request::{dump, fetch_one, WriteRequest, NAME_MAX_LEN},
    handle::Handle,
    message::IpvsMessage,
};

/// Requests on virtual services; from [`Handle::service`].
#[derive(Clone, Debug)]
pub struct ServiceHandle(Handle);

impl ServiceHandle {
    pub(crate) fn new(handle: Handle) -> Self {
        Self(handle)
    }

    /// Add a service (`ipvsadm -A`); EEXIST if it exists.
    pub fn add(&self, service: &Service) -> WriteRequest {
        WriteRequest::new(
            self.0.clone(),
            IpvsMessage::new_service(service),
            Operation::AddService,
            service.key.to_string(),
        )
        .refuse(check_names(service))
    }

    /// Replace a service's settings (`ipvsadm -E`); ESRCH if missing.
    pub fn set(&self, service: &Service) -> WriteRequest {
        WriteRequest::new(
            self.0.clone(),
            IpvsMessage::set_service(service),
            Operation::SetService,
            service.key.to_string(),
        )
        .refuse(check_names(service))
    }

    /// Delete a service and its destinations (`ipvsadm -D`); ESRCH if
    /// missing.
    pub fn del(&self, service: impl AsRef<ServiceKey>) -> WriteRequest {
        let key = service.as_ref();
        WriteRequest::new(
            self.0.clone(),
            IpvsMessage::del_service(key),
            Operation::DelService,
            key.to_string(),
        )
    }

    /// Zero one service's counters (`ipvsadm -Z -t ...`).
    pub fn zero(&self, service: impl AsRef<ServiceKey>) -> WriteRequest {
        let key = service.as_ref();
        WriteRequest::new(
            self.0.clone(),
            IpvsMessage::zero(Some(key)),
            Operation::Zero,
            key.to_string(),
        )
    }

    /// Read one service; ESRCH ([`Error::is_not_found`]) if missing.
    pub fn get(&self, service: impl AsRef<ServiceKey>) -> ServiceGetRequest {
        ServiceGetRequest {
            handle: self.0.clone(),
            key: *service.as_ref(),
        }
    }

    /// Dump every service.
    pub fn list(&self) -> ServiceListRequest {
        ServiceListRequest {
            handle: self.0.clone(),
        }
    }
}

/// Scheduler and persistence engine names must fit the kernel's buffers.
fn check_names(service: &Service) -> Option<String> {
    let names = [
        Some(&service.scheduler),
        service.persistence_engine.as_ref(),
    ];
    names.into_iter().flatten().find_map(|name| {
        (name.len() > NAME_MAX_LEN || name.contains('\0')).then(|| {
            format!(
                "name {name:?} is longer than {NAME_MAX_LEN} bytes or \
                 contains NUL"
            )
        })
    })
}

/// Read one service; from [`ServiceHandle::get`].
#[derive(Debug)]
#[must_use = "a request does nothing until executed"]
pub struct ServiceGetRequest {
    handle: Handle,
    key: ServiceKey,
}

impl ServiceGetRequest {
    /// Sends the request and reads the service.
    pub async fn execute(self) -> Result<Service, Error> {
        let object = self.key.to_string();
        let reply = fetch_one(
            &self.handle,
            IpvsMessage::get_service(&self.key),
            Operation::GetService,
            &object,
        )
        .await?;
        reply
            .to_service()
            .map_err(Error::decode(Operation::GetService, &object))
    }
}

/// Dump every service; from [`ServiceHandle::list`].
#[derive(Debug)]
#[must_use = "a request does nothing until executed"]
pub struct ServiceListRequest {
    handle: Handle,
}

impl ServiceListRequest {
    /// A service that does not decode is an `Err` item; the rest follow.
    pub fn execute(
        self,
    ) -> impl Stream<Item = Result<Service, Error>> + Send + Unpin {
        let object = "all services".to_owned();
        dump(
            self.handle,
            IpvsMessage::dump_services(),
            Operation::ListServices,
            object.clone(),
        )
        .map(move |reply| {
            reply.and_then(|message| {
                message
                    .to_service()
                    .map_err(Error::decode(Operation::ListServices, &object))
            })
        })
    }
}
