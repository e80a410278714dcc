//! Sending requests and reading their replies: writes (checked against
//! their acknowledgement), single replies and dumps.

use std::pin::Pin;

use futures::{lock::OwnedMutexGuard, stream, Stream, StreamExt, TryStreamExt};
use genetlink::GenetlinkHandle;
use netlink_packet_core::{
    DecodeError, Emitable, NetlinkMessage, NetlinkPayload, NLM_F_ACK,
    NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_generic::GenlMessage;

use crate::{
    error::{Error, Operation},
    handle::Handle,
    message::IpvsMessage,
};

/// Longest name the kernel accepts for a scheduler or persistence engine
/// (`IP_VS_SCHEDNAME_MAXLEN` / `IP_VS_PENAME_MAXLEN`, minus the NUL).
pub(crate) const NAME_MAX_LEN: usize = 15;

/// An attribute's length field is 16 bits.
const ATTRIBUTE_MAX_LEN: usize = u16::MAX as usize;

type Reply = Result<NetlinkMessage<GenlMessage<IpvsMessage>>, DecodeError>;
pub(crate) type Replies = Pin<Box<dyn Stream<Item = Reply> + Send>>;

/// A request that changes kernel state and succeeds when the kernel
/// acknowledges it: add, set or delete a service or destination, flush,
/// set timeouts.
#[derive(Debug)]
#[must_use = "a request does nothing until executed"]
pub struct WriteRequest {
    handle: Handle,
    message: IpvsMessage,
    operation: Operation,
    object: String,
    invalid: Option<String>,
}

impl WriteRequest {
    pub(crate) fn new(
        handle: Handle,
        message: IpvsMessage,
        operation: Operation,
        object: String,
    ) -> Self {
        Self {
            handle,
            message,
            operation,
            object,
            invalid: None,
        }
    }

    /// Mark the request as refused before sending (it fails on execute).
    pub(crate) fn refuse(mut self, reason: Option<String>) -> Self {
        self.invalid = reason;
        self
    }

    /// The message to be sent, to change what the typed API cannot.
    pub fn message_mut(&mut self) -> &mut IpvsMessage {
        &mut self.message
    }

    /// The message to be sent.
    pub fn message(&self) -> &IpvsMessage {
        &self.message
    }

    /// What the request does, as errors name it.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The object this request is about, as errors name it.
    pub fn object(&self) -> &str {
        &self.object
    }

    /// Send the request and wait for the kernel's acknowledgement.
    pub async fn execute(self) -> Result<(), Error> {
        if let Some(reason) = self.invalid {
            return Err(Error::InvalidRequest {
                operation: self.operation,
                object: self.object,
                reason,
            });
        }
        let id = self.handle.family_id().await?;
        let mut genl = self.handle.genl();
        self.send_and_check(&mut genl, id).await
    }

    /// Send without waiting (the future resolves once the ack is read).
    /// Used by batches, which resolve the family once for all requests.
    pub(crate) async fn send_and_check(
        self,
        genl: &mut GenetlinkHandle,
        family_id: u16,
    ) -> Result<(), Error> {
        let Self {
            message,
            operation,
            object,
            invalid,
            ..
        } = self;
        if let Some(reason) = invalid {
            return Err(Error::InvalidRequest {
                operation,
                object,
                reason,
            });
        }
        let replies = send(
            genl,
            family_id,
            message,
            NLM_F_REQUEST | NLM_F_ACK,
            operation,
            &object,
        )?;
        check_ack(replies, operation, &object).await
    }
}

/// Check a message fits the wire format before handing it to the encoder,
/// whose length fields would otherwise overflow.
fn check_encodable(
    message: &IpvsMessage,
    operation: Operation,
    object: &str,
) -> Result<(), Error> {
    if message.buffer_len() > ATTRIBUTE_MAX_LEN {
        return Err(Error::InvalidRequest {
            operation,
            object: object.to_owned(),
            reason: format!(
                "message of {} bytes exceeds the attribute size limit",
                message.buffer_len()
            ),
        });
    }
    Ok(())
}

/// Put a message on the connection's queue and return its replies.
pub(crate) fn send(
    genl: &mut GenetlinkHandle,
    family_id: u16,
    message: IpvsMessage,
    flags: u16,
    operation: Operation,
    object: &str,
) -> Result<Replies, Error> {
    check_encodable(&message, operation, object)?;
    let mut genl_message = GenlMessage::from_payload(message);
    genl_message.set_resolved_family_id(family_id);
    let mut request = NetlinkMessage::from(genl_message);
    request.header.flags = flags;
    request.finalize();
    let replies =
        genl.send_request(request)
            .map_err(|source| Error::Transport {
                operation,
                object: object.to_owned(),
                source,
            })?;
    Ok(Box::pin(replies))
}

/// Wait for the acknowledgement of a write; an error reply fails it, and so
/// does a connection that closes before answering.
pub(crate) async fn check_ack(
    mut replies: Replies,
    operation: Operation,
    object: &str,
) -> Result<(), Error> {
    while let Some(reply) = replies.next().await {
        let reply = reply.map_err(Error::decode(operation, object))?;
        match reply.payload {
            NetlinkPayload::Error(err) if err.code.is_some() => {
                return Err(Error::kernel(operation, object, err));
            }
            NetlinkPayload::Error(_) => return Ok(()),
            // Noop and friends carry nothing for us.
            _ => {}
        }
    }
    Err(Error::UnexpectedReply {
        operation,
        object: object.to_owned(),
        detail: "the connection closed before the kernel acknowledged"
            .to_owned(),
    })
}

/// Send a request that has exactly one reply message and return it.
pub(crate) async fn fetch_one(
    handle: &Handle,
    message: IpvsMessage,
    operation: Operation,
    object: &str,
) -> Result<IpvsMessage, Error> {
    let id = handle.family_id().await?;
    let mut genl = handle.genl();
    let mut replies = send(
        &mut genl,
        id,
        message,
        NLM_F_REQUEST | NLM_F_ACK,
        operation,
        object,
    )?;
    let mut answer = None;
    while let Some(reply) = replies.next().await {
        let reply = reply.map_err(Error::decode(operation, object))?;
        match reply.payload {
            NetlinkPayload::InnerMessage(genl) if answer.is_none() => {
                answer = Some(genl.payload)
            }
            NetlinkPayload::InnerMessage(_) => {
                return Err(Error::UnexpectedReply {
                    operation,
                    object: object.to_owned(),
                    detail: "more than one reply message".to_owned(),
                })
            }
            NetlinkPayload::Error(err) if err.code.is_some() => {
                return Err(Error::kernel(operation, object, err));
            }
            NetlinkPayload::Error(_) => break,
            _ => {}
        }
    }
    answer.ok_or_else(|| Error::UnexpectedReply {
        operation,
        object: object.to_owned(),
        detail: "no reply message before the acknowledgement".to_owned(),
    })
}

/// Send a dump request and stream the reply messages. A message that does
/// not decode becomes an `Err` item and the dump goes on; a kernel error or
/// a dump that ends without `NLMSG_DONE` ends the stream with an `Err`.
pub(crate) fn dump(
    handle: Handle,
    message: IpvsMessage,
    operation: Operation,
    object: String,
) -> Pin<Box<dyn Stream<Item = Result<IpvsMessage, Error>> + Send>> {
    let start_object = object.clone();
    let start = async move {
        let id = handle.family_id().await?;
        let turn = handle.dump_turn().lock_owned().await;
        let mut genl = handle.genl();
        let replies = send(
            &mut genl,
            id,
            message,
            NLM_F_REQUEST | NLM_F_DUMP,
            operation,
            &start_object,
        )?;
        Ok::<_, Error>(DumpState {
            replies: Some(replies),
            turn: Some(turn),
        })
    };
    Box::pin(
        stream::once(start)
            .map_ok(move |state| {
                dump_messages(state, operation, object.clone())
            })
            .try_flatten(),
    )
}

/// A dump in progress and this connection's dump turn, held until the
/// kernel has sent the whole dump.
struct DumpState {
    replies: Option<Replies>,
    turn: Option<OwnedMutexGuard<()>>,
}

impl DumpState {
    /// The dump is over (done, or failed): the next one may start.
    fn finish(mut self) {
        self.replies = None;
        self.turn = None;
    }
}

impl Drop for DumpState {
    fn drop(&mut self) {
        // Dropped mid-dump by its consumer: the kernel goes on sending and
        // would answer the next dump with EBUSY, so read the rest in the
        // background and only then pass the turn on.
        let (Some(mut replies), Some(turn)) =
            (self.replies.take(), self.turn.take())
        else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                while replies.next().await.is_some() {}
                drop(turn);
            });
        }
    }
}

fn dump_messages(
    state: DumpState,
    operation: Operation,
    object: String,
) -> impl Stream<Item = Result<IpvsMessage, Error>> + Send {
    stream::unfold(Some(state), move |state| {
        let object = object.clone();
        async move {
            let mut state = state?;
            loop {
                let next = match state.replies.as_mut() {
                    Some(replies) => replies.next().await,
                    None => None,
                };
                let Some(reply) = next else {
                    state.finish();
                    let err = Error::UnexpectedReply {
                        operation,
                        object,
                        detail: "the dump ended without NLMSG_DONE".to_owned(),
                    };
                    return Some((Err(err), None));
                };
                let reply = match reply {
                    Ok(reply) => reply,
                    Err(source) => {
                        let err = Error::Decode {
                            operation,
                            object,
                            source,
                        };
                        return Some((Err(err), Some(state)));
                    }
                };
                match reply.payload {
                    NetlinkPayload::InnerMessage(genl) => {
                        return Some((Ok(genl.payload), Some(state)));
                    }
                    NetlinkPayload::Done(_) => {
                        state.finish();
                        return None;
                    }
                    NetlinkPayload::Error(err) if err.code.is_some() => {
                        state.finish();
                        let err = Error::kernel(operation, &object, err);
                        return Some((Err(err), None));
                    }
                    _ => {}
                }
            }
        }
    })
}
