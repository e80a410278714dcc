//! One write to the IPVS table as a value, which both write paths take:
//! a [`Batch`] over generic netlink and the [`SockoptSocket`]. A caller
//! with operations of its own lowers each once, to a [`Write`], whichever
//! path sends it.

use crate::{
    dest::Destination,
    error::{Error, Operation},
    handle::batch::Batch,
    service::{Service, ServiceKey},
    sockopt::SockoptSocket,
};

/// A write of a virtual service or of one of its destinations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Add a virtual service (`ipvsadm -A`).
    AddService(Service),
    /// Change a virtual service's scheduler, flags or persistence
    /// (`ipvsadm -E`).
    SetService(Service),
    /// Delete a virtual service and its destinations (`ipvsadm -D`).
    DelService(ServiceKey),
    /// Add a destination to a service (`ipvsadm -a`).
    AddDest(ServiceKey, Destination),
    /// Change a destination's weight, forwarding method or thresholds
    /// (`ipvsadm -e`).
    SetDest(ServiceKey, Destination),
    /// Delete a destination (`ipvsadm -d`); only its address and port
    /// matter.
    DelDest(ServiceKey, Destination),
}

impl Write {
    /// What it does, as its errors name it.
    pub fn operation(&self) -> Operation {
        match self {
            Write::AddService(_) => Operation::AddService,
            Write::SetService(_) => Operation::SetService,
            Write::DelService(_) => Operation::DelService,
            Write::AddDest(..) => Operation::AddDest,
            Write::SetDest(..) => Operation::SetDest,
            Write::DelDest(..) => Operation::DelDest,
        }
    }

    /// The virtual service it writes to.
    pub fn service(&self) -> &ServiceKey {
        match self {
            Write::AddService(service) | Write::SetService(service) => {
                &service.key
            }
            Write::DelService(key)
            | Write::AddDest(key, _)
            | Write::SetDest(key, _)
            | Write::DelDest(key, _) => key,
        }
    }
}

impl Batch {
    /// Queue `write`.
    pub fn write(&mut self, write: &Write) -> &mut Self {
        match write {
            Write::AddService(service) => self.add_service(service),
            Write::SetService(service) => self.set_service(service),
            Write::DelService(key) => self.del_service(key),
            Write::AddDest(key, dest) => self.add_dest(key, dest),
            Write::SetDest(key, dest) => self.set_dest(key, dest),
            Write::DelDest(key, dest) => self.del_dest(key, dest),
        }
    }
}

impl SockoptSocket {
    /// Sends `write` as one `setsockopt`: IPv4 virtual services only.
    pub fn write(&self, write: &Write) -> Result<(), Error> {
        match write {
            Write::AddService(service) => self.add_service(service),
            Write::SetService(service) => self.set_service(service),
            Write::DelService(key) => self.del_service(key),
            Write::AddDest(key, dest) => self.add_dest(key, dest),
            Write::SetDest(key, dest) => self.set_dest(key, dest),
            Write::DelDest(key, dest) => self.del_dest(key, dest),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queued as a value or by its own method, a write is the same
    /// request: the same message, named the same way.
    #[tokio::test]
    async fn a_write_is_queued_as_its_own_method_queues_it() {
        // Nothing is sent: the connection is never polled.
        let (_connection, handle, _) = crate::new_connection().unwrap();
        let key = ServiceKey::tcp("198.18.0.10".parse().unwrap(), 80);
        let service = Service::new(key).with_scheduler("rr");
        let dest = Destination::new("198.19.0.5".parse().unwrap(), 8080);
        let writes = [
            Write::AddService(service.clone()),
            Write::SetService(service.clone()),
            Write::DelService(key),
            Write::AddDest(key, dest.clone()),
            Write::SetDest(key, dest.clone()),
            Write::DelDest(key, dest.clone()),
        ];
        let mut by_value = handle.batch();
        for write in &writes {
            by_value.write(write);
            assert_eq!(write.service(), &key);
        }
        let mut by_method = handle.batch();
        by_method
            .add_service(&service)
            .set_service(&service)
            .del_service(key)
            .add_dest(key, &dest)
            .set_dest(key, &dest)
            .del_dest(key, &dest);
        let messages = |batch: &Batch| -> Vec<_> {
            batch
                .requests()
                .iter()
                .map(|r| r.message().clone())
                .collect()
        };
        assert_eq!(messages(&by_value), messages(&by_method));
        let operations: Vec<_> = writes.iter().map(Write::operation).collect();
        assert_eq!(
            operations,
            [
                Operation::AddService,
                Operation::SetService,
                Operation::DelService,
                Operation::AddDest,
                Operation::SetDest,
                Operation::DelDest,
            ]
        );
    }
}
