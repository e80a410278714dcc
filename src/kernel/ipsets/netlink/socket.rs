//! The `NETLINK_NETFILTER` socket and the two exchanges ipset needs: a
//! pipelined batch of acknowledged requests, and a request answered by
//! data (a dump, a type query).
//!
//! The socket is blocking on purpose: the kernel handles netlink requests
//! inside `sendmsg`, so by the time a send returns every answer is
//! already queued and a receive never waits for anything else. A receive
//! timeout still bounds a lost answer.

use std::{io, os::fd::AsRawFd, time::Duration};

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use super::{
    message::{replies, Reply},
    DecodeError,
};

/// Requests per send. Each queues one ack skb (a few hundred bytes of
/// receive buffer with overhead); the window keeps them all in the buffer
/// so none is dropped (ENOBUFS), and each send well under the socket's
/// send buffer.
pub(crate) const WINDOW: usize = 256;
/// Bytes of encoded requests per send, whatever their number.
pub(crate) const WINDOW_BYTES: usize = 64 * 1024;

const RECV_BUF: usize = 64 * 1024;
const RCVBUF_SIZE: libc::c_int = 4 * 1024 * 1024;
const RECV_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("netlink socket: {0}")]
    Io(#[from] io::Error),
    #[error("kernel answered errno {0}")]
    Errno(i32),
    #[error("undecodable reply: {0}")]
    Decode(#[from] DecodeError),
}

pub(crate) struct IpsetSocket {
    socket: Socket,
    next_seq: u32,
    rx: Vec<u8>,
}

impl IpsetSocket {
    pub(crate) fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        // Error acks then carry only the failed request's header: the
        // sequence number is all we match on.
        socket.set_cap_ack(true)?;
        set_rcvbuf(&socket);
        set_recv_timeout(&socket, RECV_TIMEOUT)?;
        Ok(Self {
            socket,
            next_seq: 1,
            rx: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Reserves `count` consecutive sequence numbers.
    pub(crate) fn reserve_seqs(&mut self, count: usize) -> u32 {
        let first = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(count as u32);
        first
    }

    fn recv(&mut self) -> io::Result<&[u8]> {
        self.rx.clear();
        let n = self.socket.recv(&mut self.rx, libc::MSG_TRUNC)?;
        if n > self.rx.len() {
            return Err(io::Error::other(format!(
                "netlink datagram of {n} bytes truncated to {}",
                self.rx.len()
            )));
        }
        Ok(&self.rx)
    }

    /// Sends `batch`, `count` requests numbered from `first_seq` each with
    /// `NLM_F_ACK`, and collects their answers: `Some(0)` for success,
    /// `Some(errno)` for a failure, `None` when the answer never came
    /// (then the error says why).
    pub(crate) fn send_acked(
        &mut self,
        batch: &[u8],
        first_seq: u32,
        count: usize,
    ) -> (Vec<Option<i32>>, Option<RequestError>) {
        let mut results = vec![None; count];
        if let Err(e) = self.socket.send(batch, 0) {
            return (results, Some(e.into()));
        }
        let mut pending = count;
        while pending > 0 {
            let datagram = match self.recv() {
                Ok(d) => d,
                Err(e) => return (results, Some(e.into())),
            };
            for reply in replies(datagram) {
                let reply = match reply {
                    Ok(r) => r,
                    Err(e) => return (results, Some(e.into())),
                };
                let Reply::Ack { seq, errno } = reply else {
                    continue;
                };
                // Answers to an earlier, abandoned exchange fall outside.
                let index = seq.wrapping_sub(first_seq) as usize;
                if let Some(slot @ None) = results.get_mut(index) {
                    *slot = Some(errno);
                    pending -= 1;
                }
            }
        }
        (results, None)
    }

    /// Sends one request and hands each ipset message answering it to
    /// `each`, until the dump's end or the request's ack.
    pub(crate) fn request(
        &mut self,
        message: &[u8],
        seq: u32,
        mut each: impl FnMut(&[u8]) -> Result<(), DecodeError>,
    ) -> Result<(), RequestError> {
        self.socket.send(message, 0)?;
        loop {
            let datagram = self.recv()?;
            for reply in replies(datagram) {
                match reply? {
                    Reply::Ipset { seq: s, attrs, .. } if s == seq => {
                        each(attrs)?
                    }
                    Reply::Done { seq: s } if s == seq => return Ok(()),
                    Reply::Ack { seq: s, errno } if s == seq => {
                        return match errno {
                            0 => Ok(()),
                            e => Err(RequestError::Errno(e)),
                        };
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A big receive buffer lets a whole window of acks queue. Root may
/// exceed `rmem_max` (SO_RCVBUFFORCE); otherwise take what is allowed.
fn set_rcvbuf(socket: &Socket) {
    let size = RCVBUF_SIZE;
    // SAFETY: a plain setsockopt on our own descriptor with an int value.
    let forced = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if forced != 0 {
        let _ = socket.set_rx_buf_sz(size);
    }
}

fn set_recv_timeout(socket: &Socket, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    // SAFETY: a plain setsockopt on our own descriptor with a timeval.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
