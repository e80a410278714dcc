//! Requests on IPVS as a whole: info and timeouts.

use crate::{
    error::{Error, Operation},
    handle::request::{fetch_one, WriteRequest},
    handle::Handle,
    info::Info,
    message::IpvsMessage,
    timeout::Timeouts,
};

/// Read version and connection table size; from [`Handle::info`].
#[derive(Debug)]
#[must_use = "a request does nothing until executed"]
pub struct InfoRequest {
    handle: Handle,
}

impl InfoRequest {
    pub(crate) fn new(handle: Handle) -> Self {
        Self { handle }
    }

    /// Sends the request and reads the reply.
    pub async fn execute(self) -> Result<Info, Error> {
        let object = "IPVS";
        let reply = fetch_one(
            &self.handle,
            IpvsMessage::get_info(),
            Operation::GetInfo,
            object,
        )
        .await?;
        reply
            .to_info()
            .map_err(Error::decode(Operation::GetInfo, object))
    }
}

/// Connection timeouts; from [`Handle::timeouts`].
#[derive(Clone, Debug)]
pub struct TimeoutsHandle(Handle);

impl TimeoutsHandle {
    pub(crate) fn new(handle: Handle) -> Self {
        Self(handle)
    }

    /// Read the tcp, tcpfin and udp timeouts.
    pub fn get(&self) -> TimeoutsGetRequest {
        TimeoutsGetRequest {
            handle: self.0.clone(),
        }
    }

    /// Change the timeouts that are `Some` and non-zero
    /// (`ipvsadm --set`).
    pub fn set(&self, timeouts: &Timeouts) -> WriteRequest {
        WriteRequest::new(
            self.0.clone(),
            IpvsMessage::set_config(timeouts),
            Operation::SetTimeouts,
            format!("timeouts ({timeouts})"),
        )
    }
}

/// Read the timeouts; from [`TimeoutsHandle::get`].
#[derive(Debug)]
#[must_use = "a request does nothing until executed"]
pub struct TimeoutsGetRequest {
    handle: Handle,
}

impl TimeoutsGetRequest {
    /// Sends the request and reads the reply.
    pub async fn execute(self) -> Result<Timeouts, Error> {
        let reply = fetch_one(
            &self.handle,
            IpvsMessage::get_config(),
            Operation::GetTimeouts,
            "timeouts",
        )
        .await?;
        Ok(reply.to_timeouts())
    }
}
