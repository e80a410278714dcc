//! The IPVS generic netlink message: a command and its attributes.

use netlink_packet_core::{
    emit_u32, parse_u32, DecodeError, DefaultNla, Emitable, ErrorContext, Nla,
    NlaBuffer, Parseable, ParseableParametrized,
};
use netlink_packet_generic::{GenlFamily, GenlHeader};

use crate::{
    address::AddressFamily,
    daemon::DaemonAttribute,
    dest::{DestAttribute, Destination},
    info::{Info, InfoAttribute},
    nla::{emit_nlas, nlas_len, parse_all},
    service::{Service, ServiceAttribute, ServiceKey},
    timeout::Timeouts,
};

/// `IPVS_GENL_NAME`.
pub const IPVS_GENL_NAME: &str = "IPVS";
/// `IPVS_GENL_VERSION`.
pub const IPVS_GENL_VERSION: u8 = 1;

const IPVS_CMD_NEW_SERVICE: u8 = 1;
const IPVS_CMD_SET_SERVICE: u8 = 2;
const IPVS_CMD_DEL_SERVICE: u8 = 3;
const IPVS_CMD_GET_SERVICE: u8 = 4;
const IPVS_CMD_NEW_DEST: u8 = 5;
const IPVS_CMD_SET_DEST: u8 = 6;
const IPVS_CMD_DEL_DEST: u8 = 7;
const IPVS_CMD_GET_DEST: u8 = 8;
const IPVS_CMD_NEW_DAEMON: u8 = 9;
const IPVS_CMD_DEL_DAEMON: u8 = 10;
const IPVS_CMD_GET_DAEMON: u8 = 11;
const IPVS_CMD_SET_CONFIG: u8 = 12;
const IPVS_CMD_GET_CONFIG: u8 = 13;
const IPVS_CMD_SET_INFO: u8 = 14;
const IPVS_CMD_GET_INFO: u8 = 15;
const IPVS_CMD_ZERO: u8 = 16;
const IPVS_CMD_FLUSH: u8 = 17;

const IPVS_CMD_ATTR_SERVICE: u16 = 1;
const IPVS_CMD_ATTR_DEST: u16 = 2;
const IPVS_CMD_ATTR_DAEMON: u16 = 3;
const IPVS_CMD_ATTR_TIMEOUT_TCP: u16 = 4;
const IPVS_CMD_ATTR_TIMEOUT_TCP_FIN: u16 = 5;
const IPVS_CMD_ATTR_TIMEOUT_UDP: u16 = 6;

/// An IPVS command (`IPVS_CMD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IpvsCmd {
    /// Add a virtual service.
    NewService,
    /// Change a virtual service.
    SetService,
    /// Delete a virtual service.
    DelService,
    /// One service, or all of them with `NLM_F_DUMP`.
    GetService,
    /// Add a destination.
    NewDest,
    /// Change a destination.
    SetDest,
    /// Delete a destination.
    DelDest,
    /// Dump only: the destinations of one service.
    GetDest,
    /// Start a connection sync daemon.
    NewDaemon,
    /// Stop a connection sync daemon.
    DelDaemon,
    /// Dump the sync daemons.
    GetDaemon,
    /// Set timeouts; also the command of `GetConfig`'s reply.
    SetConfig,
    /// Ask for the timeouts (answered with `SetConfig`).
    GetConfig,
    /// Only the command of `GetInfo`'s reply.
    SetInfo,
    /// Ask for the version and table size (answered with `SetInfo`).
    GetInfo,
    /// Zero the counters of one service or of all.
    Zero,
    /// Delete every service and destination.
    Flush,
    /// Any other command number, kept as sent.
    Other(u8),
}

impl From<IpvsCmd> for u8 {
    fn from(cmd: IpvsCmd) -> u8 {
        match cmd {
            IpvsCmd::NewService => IPVS_CMD_NEW_SERVICE,
            IpvsCmd::SetService => IPVS_CMD_SET_SERVICE,
            IpvsCmd::DelService => IPVS_CMD_DEL_SERVICE,
            IpvsCmd::GetService => IPVS_CMD_GET_SERVICE,
            IpvsCmd::NewDest => IPVS_CMD_NEW_DEST,
            IpvsCmd::SetDest => IPVS_CMD_SET_DEST,
            IpvsCmd::DelDest => IPVS_CMD_DEL_DEST,
            IpvsCmd::GetDest => IPVS_CMD_GET_DEST,
            IpvsCmd::NewDaemon => IPVS_CMD_NEW_DAEMON,
            IpvsCmd::DelDaemon => IPVS_CMD_DEL_DAEMON,
            IpvsCmd::GetDaemon => IPVS_CMD_GET_DAEMON,
            IpvsCmd::SetConfig => IPVS_CMD_SET_CONFIG,
            IpvsCmd::GetConfig => IPVS_CMD_GET_CONFIG,
            IpvsCmd::SetInfo => IPVS_CMD_SET_INFO,
            IpvsCmd::GetInfo => IPVS_CMD_GET_INFO,
            IpvsCmd::Zero => IPVS_CMD_ZERO,
            IpvsCmd::Flush => IPVS_CMD_FLUSH,
            IpvsCmd::Other(other) => other,
        }
    }
}

impl From<u8> for IpvsCmd {
    fn from(value: u8) -> Self {
        match value {
            IPVS_CMD_NEW_SERVICE => Self::NewService,
            IPVS_CMD_SET_SERVICE => Self::SetService,
            IPVS_CMD_DEL_SERVICE => Self::DelService,
            IPVS_CMD_GET_SERVICE => Self::GetService,
            IPVS_CMD_NEW_DEST => Self::NewDest,
            IPVS_CMD_SET_DEST => Self::SetDest,
            IPVS_CMD_DEL_DEST => Self::DelDest,
            IPVS_CMD_GET_DEST => Self::GetDest,
            IPVS_CMD_NEW_DAEMON => Self::NewDaemon,
            IPVS_CMD_DEL_DAEMON => Self::DelDaemon,
            IPVS_CMD_GET_DAEMON => Self::GetDaemon,
            IPVS_CMD_SET_CONFIG => Self::SetConfig,
            IPVS_CMD_GET_CONFIG => Self::GetConfig,
            IPVS_CMD_SET_INFO => Self::SetInfo,
            IPVS_CMD_GET_INFO => Self::GetInfo,
            IPVS_CMD_ZERO => Self::Zero,
            IPVS_CMD_FLUSH => Self::Flush,
            other => Self::Other(other),
        }
    }
}

/// A top-level attribute of an IPVS message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IpvsAttribute {
    /// `IPVS_CMD_ATTR_SERVICE`.
    Service(Vec<ServiceAttribute>),
    /// `IPVS_CMD_ATTR_DEST`.
    Dest(Vec<DestAttribute>),
    /// `IPVS_CMD_ATTR_DAEMON`.
    Daemon(Vec<DaemonAttribute>),
    /// TCP timeout in seconds (`IPVS_CMD_ATTR_TIMEOUT_TCP`).
    TimeoutTcp(u32),
    /// TCP timeout after a FIN, in seconds (`IPVS_CMD_ATTR_TIMEOUT_TCP_FIN`).
    TimeoutTcpFin(u32),
    /// UDP timeout in seconds (`IPVS_CMD_ATTR_TIMEOUT_UDP`).
    TimeoutUdp(u32),
    /// Attributes of an info reply, whose numbers overlap the ones above.
    Info(InfoAttribute),
    /// An attribute this crate does not know, kept as received.
    Other(DefaultNla),
}

impl Nla for IpvsAttribute {
    fn value_len(&self) -> usize {
        match self {
            Self::Service(nlas) => nlas_len(nlas),
            Self::Dest(nlas) => nlas_len(nlas),
            Self::Daemon(nlas) => nlas_len(nlas),
            Self::TimeoutTcp(_)
            | Self::TimeoutTcpFin(_)
            | Self::TimeoutUdp(_) => 4,
            Self::Info(nla) => nla.value_len(),
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Service(_) => IPVS_CMD_ATTR_SERVICE,
            Self::Dest(_) => IPVS_CMD_ATTR_DEST,
            Self::Daemon(_) => IPVS_CMD_ATTR_DAEMON,
            Self::TimeoutTcp(_) => IPVS_CMD_ATTR_TIMEOUT_TCP,
            Self::TimeoutTcpFin(_) => IPVS_CMD_ATTR_TIMEOUT_TCP_FIN,
            Self::TimeoutUdp(_) => IPVS_CMD_ATTR_TIMEOUT_UDP,
            Self::Info(nla) => nla.kind(),
            Self::Other(nla) => nla.kind(),
        }
    }

    fn is_nested(&self) -> bool {
        // The kernel nests without NLA_F_NESTED (nla_nest_start_noflag);
        // emit the same bytes. Decoding accepts the flag either way.
        match self {
            Self::Info(nla) => nla.is_nested(),
            Self::Other(nla) => nla.is_nested(),
            _ => false,
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Self::Service(nlas) => emit_nlas(nlas, buffer),
            Self::Dest(nlas) => emit_nlas(nlas, buffer),
            Self::Daemon(nlas) => emit_nlas(nlas, buffer),
            Self::TimeoutTcp(v)
            | Self::TimeoutTcpFin(v)
            | Self::TimeoutUdp(v) => {
                let _ = emit_u32(buffer, *v);
            }
            Self::Info(nla) => nla.emit_value(buffer),
            Self::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl IpvsAttribute {
    fn parse_command(buf: &NlaBuffer<&[u8]>) -> Result<Self, DecodeError> {
        let value = buf.value();
        Ok(match buf.kind() {
            IPVS_CMD_ATTR_SERVICE => Self::Service(parse_all(
                value,
                "IPVS_CMD_ATTR_SERVICE",
                |nla| ServiceAttribute::parse(nla),
            )?),
            IPVS_CMD_ATTR_DEST => {
                Self::Dest(parse_all(value, "IPVS_CMD_ATTR_DEST", |nla| {
                    DestAttribute::parse(nla)
                })?)
            }
            IPVS_CMD_ATTR_DAEMON => {
                Self::Daemon(parse_all(value, "IPVS_CMD_ATTR_DAEMON", |nla| {
                    DaemonAttribute::parse(nla)
                })?)
            }
            IPVS_CMD_ATTR_TIMEOUT_TCP => Self::TimeoutTcp(
                parse_u32(value)
                    .context("invalid IPVS_CMD_ATTR_TIMEOUT_TCP")?,
            ),
            IPVS_CMD_ATTR_TIMEOUT_TCP_FIN => Self::TimeoutTcpFin(
                parse_u32(value)
                    .context("invalid IPVS_CMD_ATTR_TIMEOUT_TCP_FIN")?,
            ),
            IPVS_CMD_ATTR_TIMEOUT_UDP => Self::TimeoutUdp(
                parse_u32(value)
                    .context("invalid IPVS_CMD_ATTR_TIMEOUT_UDP")?,
            ),
            _ => Self::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// The payload of an IPVS generic netlink message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpvsMessage {
    /// The command.
    pub cmd: IpvsCmd,
    /// Its attributes, in order.
    pub nlas: Vec<IpvsAttribute>,
}

impl GenlFamily for IpvsMessage {
    fn family_name() -> &'static str {
        IPVS_GENL_NAME
    }

    fn command(&self) -> u8 {
        self.cmd.into()
    }

    fn version(&self) -> u8 {
        IPVS_GENL_VERSION
    }
}

impl Emitable for IpvsMessage {
    fn buffer_len(&self) -> usize {
        nlas_len(&self.nlas)
    }

    fn emit(&self, buffer: &mut [u8]) {
        emit_nlas(&self.nlas, buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for IpvsMessage {
    fn parse_with_param(
        buf: &[u8],
        header: GenlHeader,
    ) -> Result<Self, DecodeError> {
        let cmd = IpvsCmd::from(header.cmd);
        let nlas = match cmd {
            IpvsCmd::SetInfo | IpvsCmd::GetInfo => {
                parse_all(buf, "IPVS info", |nla| {
                    InfoAttribute::parse(nla).map(IpvsAttribute::Info)
                })?
            }
            _ => parse_all(buf, "IPVS message", IpvsAttribute::parse_command)?,
        };
        Ok(Self { cmd, nlas })
    }
}

impl IpvsMessage {
    /// A message with this command and attributes.
    pub fn new(cmd: IpvsCmd, nlas: Vec<IpvsAttribute>) -> Self {
        Self { cmd, nlas }
    }

    /// `ipvsadm -A`.
    pub fn new_service(service: &Service) -> Self {
        Self::new(
            IpvsCmd::NewService,
            vec![IpvsAttribute::Service(service.attributes())],
        )
    }

    /// `ipvsadm -E`: every setting of the service is replaced.
    pub fn set_service(service: &Service) -> Self {
        Self::new(
            IpvsCmd::SetService,
            vec![IpvsAttribute::Service(service.attributes())],
        )
    }

    /// `ipvsadm -D`.
    pub fn del_service(key: &ServiceKey) -> Self {
        Self::new(
            IpvsCmd::DelService,
            vec![IpvsAttribute::Service(key.attributes())],
        )
    }

    /// One service by key (send without `NLM_F_DUMP`).
    pub fn get_service(key: &ServiceKey) -> Self {
        Self::new(
            IpvsCmd::GetService,
            vec![IpvsAttribute::Service(key.attributes())],
        )
    }

    /// All services (send with `NLM_F_DUMP`).
    pub fn dump_services() -> Self {
        Self::new(IpvsCmd::GetService, vec![])
    }

    /// `ipvsadm -a`.
    pub fn new_dest(service: &ServiceKey, dest: &Destination) -> Self {
        Self::new(
            IpvsCmd::NewDest,
            vec![
                IpvsAttribute::Service(service.attributes()),
                IpvsAttribute::Dest(dest.attributes()),
            ],
        )
    }

    /// `ipvsadm -e`.
    pub fn set_dest(service: &ServiceKey, dest: &Destination) -> Self {
        Self::new(
            IpvsCmd::SetDest,
            vec![
                IpvsAttribute::Service(service.attributes()),
                IpvsAttribute::Dest(dest.attributes()),
            ],
        )
    }

    /// `ipvsadm -d`.
    pub fn del_dest(service: &ServiceKey, dest: &Destination) -> Self {
        Self::new(
            IpvsCmd::DelDest,
            vec![
                IpvsAttribute::Service(service.attributes()),
                IpvsAttribute::Dest(dest.key_attributes()),
            ],
        )
    }

    /// The destinations of one service (send with `NLM_F_DUMP`).
    pub fn dump_dests(service: &ServiceKey) -> Self {
        Self::new(
            IpvsCmd::GetDest,
            vec![IpvsAttribute::Service(service.attributes())],
        )
    }

    /// `ipvsadm -C`.
    pub fn flush() -> Self {
        Self::new(IpvsCmd::Flush, vec![])
    }

    /// `ipvsadm -Z`: one service's counters, or all with `None`.
    pub fn zero(service: Option<&ServiceKey>) -> Self {
        let nlas = service
            .map(|key| vec![IpvsAttribute::Service(key.attributes())])
            .unwrap_or_default();
        Self::new(IpvsCmd::Zero, nlas)
    }

    /// Ask for IPVS's version and connection table size.
    pub fn get_info() -> Self {
        Self::new(IpvsCmd::GetInfo, vec![])
    }

    /// Ask for the timeouts (the reply is a `SetConfig` message).
    pub fn get_config() -> Self {
        Self::new(IpvsCmd::GetConfig, vec![])
    }

    /// `ipvsadm --set`; fields left `None` are not sent.
    pub fn set_config(timeouts: &Timeouts) -> Self {
        let nlas = [
            timeouts.tcp.map(IpvsAttribute::TimeoutTcp),
            timeouts.tcp_fin.map(IpvsAttribute::TimeoutTcpFin),
            timeouts.udp.map(IpvsAttribute::TimeoutUdp),
        ]
        .into_iter()
        .flatten()
        .collect();
        Self::new(IpvsCmd::SetConfig, nlas)
    }

    /// The nested service attributes, if any.
    pub fn service_attributes(&self) -> Option<&[ServiceAttribute]> {
        self.nlas.iter().find_map(|nla| match nla {
            IpvsAttribute::Service(attrs) => Some(attrs.as_slice()),
            _ => None,
        })
    }

    /// The nested destination attributes, if any.
    pub fn dest_attributes(&self) -> Option<&[DestAttribute]> {
        self.nlas.iter().find_map(|nla| match nla {
            IpvsAttribute::Dest(attrs) => Some(attrs.as_slice()),
            _ => None,
        })
    }

    /// The service a `NewService` reply (or request) describes.
    pub fn to_service(&self) -> Result<Service, DecodeError> {
        let attrs = self
            .service_attributes()
            .ok_or_else(|| DecodeError::from("message has no service"))?;
        Service::from_attributes(attrs)
    }

    /// The destination a `NewDest` reply describes; `service_family` reads
    /// addresses from kernels that do not send the destination's family.
    pub fn to_destination(
        &self,
        service_family: AddressFamily,
    ) -> Result<Destination, DecodeError> {
        let attrs = self
            .dest_attributes()
            .ok_or_else(|| DecodeError::from("message has no destination"))?;
        Destination::from_attributes(attrs, service_family)
    }

    /// The reply to `GetInfo`.
    pub fn to_info(&self) -> Result<Info, DecodeError> {
        let attrs: Vec<InfoAttribute> = self
            .nlas
            .iter()
            .filter_map(|nla| match nla {
                IpvsAttribute::Info(attr) => Some(attr.clone()),
                _ => None,
            })
            .collect();
        Info::from_attributes(&attrs)
    }

    /// The reply to `GetConfig` (or a `SetConfig` request).
    pub fn to_timeouts(&self) -> Timeouts {
        let mut timeouts = Timeouts::default();
        for nla in &self.nlas {
            match nla {
                IpvsAttribute::TimeoutTcp(v) => timeouts.tcp = Some(*v),
                IpvsAttribute::TimeoutTcpFin(v) => timeouts.tcp_fin = Some(*v),
                IpvsAttribute::TimeoutUdp(v) => timeouts.udp = Some(*v),
                _ => {}
            }
        }
        timeouts
    }
}
