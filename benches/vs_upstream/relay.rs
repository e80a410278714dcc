//! The churn's writes made from the host, on the guest's word.
//!
//! Written from inside the guest, each churn change cost the bench about
//! as much of the guest's CPU as it cost the proxy (TLS, the slice's JSON
//! out and the whole object's JSON back, under TCG): at 100 changes a
//! second on two vCPUs the bench took half the node the proxy was
//! measured on. On a real node the writers (controllers) run elsewhere.
//! So the guest's writer sends one short line per change to `relay` on
//! the host (through the same guestfwd as the API server), which makes
//! the API request natively and answers when it is done. The guest still
//! stamps each change's time, both its `issued` instant and the slice's
//! trigger-time annotation, so every latency is on the guest's clock, and
//! the hop to the host counts against the proxy, not for it.
//!
//! One line per change, `ID K ADDRESS TRIGGER` (TRIGGER an RFC 3339
//! time); one answer per line, in any order: `ID ok` or `ID err REASON`.

use std::{
    collections::HashMap,
    net::Ipv4Addr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use anyhow::{bail, Context};
use k8s_openapi::{api::discovery::v1::EndpointSlice, jiff::Timestamp};
use kube::{api::Api, Client};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot},
};

use crate::{
    api,
    guest_cpu::{by_command, MachineCpu},
    objects,
};

/// On the host: serve the guest's writes on 127.0.0.1:`port` until
/// killed, with the admin's `KUBECONFIG`.
pub async fn serve(port: u16) -> anyhow::Result<()> {
    let client = Client::try_default().await.context("KUBECONFIG")?;
    let slices = api::slices(&client);
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("listening on 127.0.0.1:{port}"))?;
    eprintln!("relay: writing the guest's churn from 127.0.0.1:{port}");
    let mut watching = false;
    loop {
        let (stream, _) = listener.accept().await?;
        // From the churn's first connection, so that the host's minutes
        // line up with the churn's.
        if !std::mem::replace(&mut watching, true) {
            tokio::spawn(watch_host());
        }
        let slices = slices.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, slices).await {
                eprintln!("relay: {e:#}");
            }
        });
    }
}

async fn connection(
    stream: TcpStream,
    slices: Api<EndpointSlice>,
) -> anyhow::Result<()> {
    let (read, mut write) = stream.into_split();
    let (answers, mut to_send) = mpsc::unbounded_channel::<String>();
    let sender = tokio::spawn(async move {
        while let Some(line) = to_send.recv().await {
            write.write_all(line.as_bytes()).await?;
        }
        anyhow::Ok(())
    });
    let mut lines = BufReader::new(read).lines();
    while let Some(line) = lines.next_line().await? {
        let (slices, answers) = (slices.clone(), answers.clone());
        tokio::spawn(async move {
            let answer = match parse(&line) {
                Ok((id, k, address, trigger)) => {
                    let slice = objects::slice_replacing(k, address, trigger);
                    match api::write_slice(&slices, k, &slice).await {
                        Ok(()) => format!("{id} ok"),
                        // A newline ends the answer: none in the reason.
                        Err(e) => format!("{id} err {e:#}").replace('\n', " "),
                    }
                }
                // Without an id the guest cannot be told which write
                // failed; it times out instead.
                Err(e) => {
                    eprintln!("relay: {line:?}: {e:#}");
                    return;
                }
            };
            let _ = answers.send(answer + "\n");
        });
    }
    drop(answers);
    sender.await??;
    Ok(())
}

/// Every minute, how busy the host's CPUs were and who used them (the
/// last, partial minute is not printed). Under TCG the guest's clock runs
/// on while its vCPU threads wait for a host CPU, so a busier host makes
/// every guest task look dearer; this tells that apart from the proxy's
/// own work.
async fn watch_host() {
    let minute = std::time::Duration::from_secs(60);
    let mut machine = MachineCpu::read().ok();
    let mut commands = by_command();
    let mut tick = tokio::time::interval(minute);
    tick.tick().await;
    for n in 1.. {
        tick.tick().await;
        let (Some(before), Ok(now)) = (machine, MachineCpu::read()) else {
            continue;
        };
        let spent = now.since(before);
        let after = by_command();
        let total = spent.total.as_secs_f64().max(1e-9);
        let mut users: Vec<(f64, &String)> = after
            .iter()
            .map(|(name, cpu)| {
                let was = commands.get(name).copied().unwrap_or_default();
                (cpu.saturating_sub(was).as_secs_f64(), name)
            })
            .filter(|(s, _)| *s > 0.0)
            .collect();
        users.sort_by(|a, b| b.0.total_cmp(&a.0));
        let users: Vec<String> = users
            .iter()
            .take(5)
            .map(|(s, name)| format!("{name} {:.0} %", 100.0 * s / total))
            .collect();
        eprintln!(
            "relay: host minute {n}: CPUs {:.0} % busy ({:.0} % stolen by \
             the host's hypervisor); {}",
            100.0 * spent.busy.as_secs_f64() / total,
            100.0 * spent.steal.as_secs_f64() / total,
            users.join(", ")
        );
        machine = Some(now);
        commands = after;
    }
}

fn parse(line: &str) -> anyhow::Result<(u64, usize, Ipv4Addr, Timestamp)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [id, k, address, trigger] = fields[..] else {
        bail!("expected `ID K ADDRESS TRIGGER`");
    };
    Ok((
        id.parse().context("ID")?,
        k.parse().context("K")?,
        address.parse().context("ADDRESS")?,
        trigger.parse().context("TRIGGER")?,
    ))
}

/// The writes awaiting their answer; `None` once the relay is gone.
type Waiting =
    Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Result<(), String>>>>>>;

/// In the guest: the writer's end of a relay connection.
pub struct Relay {
    lines: mpsc::UnboundedSender<String>,
    waiting: Waiting,
    next: AtomicU64,
}

impl Relay {
    /// Connects to the relay at `address` (BENCH_RELAY, HOST:PORT).
    pub async fn connect(address: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(address)
            .await
            .with_context(|| format!("the relay at {address}"))?;
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let (lines, mut to_send) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(line) = to_send.recv().await {
                if write.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
        let waiting: Waiting = Arc::new(Mutex::new(Some(HashMap::new())));
        let answered = Arc::clone(&waiting);
        tokio::spawn(async move {
            let mut answers = BufReader::new(read).lines();
            while let Ok(Some(answer)) = answers.next_line().await {
                let (id, outcome) =
                    answer.split_once(' ').unwrap_or((&answer, ""));
                let Ok(id) = id.parse::<u64>() else {
                    continue;
                };
                let result = match outcome.strip_prefix("err ") {
                    Some(reason) => Err(reason.to_owned()),
                    None => Ok(()),
                };
                let waiter =
                    lock(&answered).as_mut().and_then(|w| w.remove(&id));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(result);
                }
            }
            // The relay is gone: every write waiting, or still to come,
            // fails.
            lock(&answered).take();
        });
        Ok(Self {
            lines,
            waiting,
            next: AtomicU64::new(0),
        })
    }

    /// Has the host write service `k`'s slice with its last endpoint at
    /// `address`, stamped `trigger`; returns once the API server has
    /// answered.
    pub async fn write(
        &self,
        k: usize,
        address: Ipv4Addr,
        trigger: Timestamp,
    ) -> anyhow::Result<()> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (done, answer) = oneshot::channel();
        lock(&self.waiting)
            .as_mut()
            .context("the relay connection is closed")?
            .insert(id, done);
        self.lines
            .send(format!("{id} {k} {address} {trigger}\n"))
            .map_err(|_| anyhow::anyhow!("the relay connection is closed"))?;
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => {
                bail!("patching {} (relayed): {reason}", objects::slice_name(k))
            }
            Err(_) => bail!("the relay closed before answering"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // No holder panics; recover regardless.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
