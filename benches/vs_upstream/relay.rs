//! The churn's writes made from the host, on the guest's schedule.
//!
//! Written from inside the guest, each churn change cost the bench about
//! as much of the guest's CPU as it cost the proxy (TLS, the slice's JSON
//! out and the whole object's JSON back, under TCG): at 100 changes a
//! second on two vCPUs the bench took half the node the proxy was
//! measured on. On a real node the writers (controllers) run elsewhere.
//! So the host's `relay` makes the API requests natively, and the guest
//! keeps every change's time on its own clock.
//!
//! A line per change from the guest would cost the bench more of the
//! guest's CPU, in its TCP stack and virtio, than its reads of the kernel
//! (a profile with `BENCH_PERF=bench` shows it). So the guest sends one
//! line a second: which changes, at what rate, from when. Change `i`
//! goes to service `i mod N` with
//! [`objects::churn_address`]`(i)`, so neither side needs the other to
//! name it. The relay writes the changes of a second at their offsets
//! from the line's arrival, which is after the guest sent it: each write
//! starts no earlier than the instant the guest counts its latency from,
//! so the hop and any lateness of the relay count against the proxy, not
//! for it. Each second starts from its own line, so the two clocks need
//! only agree on the length of a second. The trigger-time annotation is
//! the guest's wall clock at the line plus the change's offset.
//!
//! Guest to relay: `second FIRST COUNT SERVICES RATE WALL` (WALL an RFC
//! 3339 time), then `end`. Relay to guest: `err I REASON` for a write
//! that failed, and after `end`, once every write is answered, `done
//! WRITTEN LATE_MS` (the most any write started behind its schedule).

use std::{collections::HashMap, sync::Arc, time::Duration};

use anyhow::{bail, Context};
use k8s_openapi::{api::discovery::v1::EndpointSlice, jiff::Timestamp};
use kube::{api::Api, Client};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot, Semaphore},
    time::Instant,
};

use crate::{
    api,
    guest_cpu::{by_command, MachineCpu},
    objects,
};

/// Writes in flight at most; a slower API server makes the relay late,
/// which it reports, rather than piling up requests.
const IN_FLIGHT: usize = 64;

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

/// One second of the guest's schedule: changes `first..first + count`
/// at `rate` a second over `services` services, the first at `wall`.
#[derive(Debug, PartialEq)]
struct Second {
    first: usize,
    count: usize,
    services: usize,
    rate: u64,
    wall: Timestamp,
}

impl Second {
    fn line(&self) -> String {
        let Self {
            first,
            count,
            services,
            rate,
            wall,
        } = self;
        format!("second {first} {count} {services} {rate} {wall}\n")
    }

    fn parse(line: &str) -> anyhow::Result<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let ["second", first, count, services, rate, wall] = fields[..] else {
            bail!("expected `second FIRST COUNT SERVICES RATE WALL`");
        };
        let second = Self {
            first: first.parse().context("FIRST")?,
            count: count.parse().context("COUNT")?,
            services: services.parse().context("SERVICES")?,
            rate: rate.parse().context("RATE")?,
            wall: wall.parse().context("WALL")?,
        };
        if second.services == 0 || second.rate == 0 {
            bail!("SERVICES and RATE must not be 0");
        }
        Ok(second)
    }

    /// Change `first + j`'s offset from the second's start.
    fn offset(&self, j: usize) -> Duration {
        Duration::from_secs_f64(j as f64 / self.rate as f64)
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
    // Lines are read, and their arrival stamped, apart from the writes:
    // a second whose writes run late must not delay the next second's
    // arrival, from which its schedule and its lateness count.
    let (seconds, mut arrived) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(read).lines();
        while let Some(line) = lines.next_line().await? {
            if line == "end" {
                return anyhow::Ok(());
            }
            let second = Second::parse(&line)
                .with_context(|| format!("the guest's line {line:?}"))?;
            let _ = seconds.send((Instant::now(), second));
        }
        bail!("the guest left without `end`")
    });
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // One write at a time per service, in the schedule's order: a second
    // write could overtake the first.
    let mut services: HashMap<usize, Arc<tokio::sync::Mutex<()>>> =
        HashMap::new();
    let (mut written, mut late) = (0usize, Duration::ZERO);
    while let Some((arrival, second)) = arrived.recv().await {
        for j in 0..second.count {
            let due = arrival + second.offset(j);
            tokio::time::sleep_until(due).await;
            let slot = slots.clone().acquire_owned().await?;
            let i = second.first + j;
            let k = objects::churn_service(i, second.services);
            let turn =
                services.entry(k).or_default().clone().lock_owned().await;
            late = late.max(due.elapsed());
            let trigger = second
                .wall
                .checked_add(second.offset(j))
                .context("the trigger time")?;
            let (slices, answers) = (slices.clone(), answers.clone());
            tokio::spawn(async move {
                let slice = objects::slice_replacing(
                    k,
                    objects::churn_address(i),
                    trigger,
                );
                if let Err(e) = api::write_slice(&slices, k, &slice).await {
                    // A newline ends the answer: none in the reason.
                    let reason = format!("{e:#}").replace('\n', " ");
                    let _ = answers.send(format!("err {i} {reason}\n"));
                }
                drop((turn, slot));
            });
            written += 1;
        }
    }
    reader.await??;
    // The last writes' answers.
    let _all = slots.acquire_many(IN_FLIGHT as u32).await?;
    let _ = answers.send(format!("done {written} {}\n", late.as_millis()));
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

/// What the relay did, once every write is answered.
pub struct Done {
    pub written: usize,
    /// The most any write started behind the guest's schedule.
    pub late: Duration,
}

/// In the guest: the schedule's end of a relay connection.
pub struct Relay {
    lines: mpsc::UnboundedSender<String>,
    failures: mpsc::UnboundedReceiver<(usize, String)>,
    done: oneshot::Receiver<anyhow::Result<Done>>,
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
        let (failed, failures) = mpsc::unbounded_channel();
        let (done_tx, done) = oneshot::channel();
        tokio::spawn(async move {
            let mut answers = BufReader::new(read).lines();
            let outcome = loop {
                let answer = match answers.next_line().await {
                    Ok(Some(answer)) => answer,
                    Ok(None) => break Err(anyhow::anyhow!("the relay closed")),
                    Err(e) => break Err(e).context("reading the relay"),
                };
                match parse_answer(&answer) {
                    Ok(Answer::Failed(i, reason)) => {
                        let _ = failed.send((i, reason));
                    }
                    Ok(Answer::Done(done)) => break Ok(done),
                    Err(e) => break Err(e),
                }
            };
            let _ = done_tx.send(outcome);
        });
        Ok(Self {
            lines,
            failures,
            done,
        })
    }

    /// Has the relay write changes `first..first + count` to `services`
    /// services at `rate` a second, starting as the line arrives; `wall`
    /// is now on the guest's clock.
    pub fn schedule(
        &self,
        first: usize,
        count: usize,
        services: usize,
        rate: u64,
        wall: Timestamp,
    ) -> anyhow::Result<()> {
        let line = Second {
            first,
            count,
            services,
            rate,
            wall,
        }
        .line();
        self.lines
            .send(line)
            .map_err(|_| anyhow::anyhow!("the relay connection is closed"))
    }

    /// A write that failed, as the relay reported it, if one is waiting:
    /// the change's number and why.
    pub fn failure(&mut self) -> Option<(usize, String)> {
        self.failures.try_recv().ok()
    }

    /// Ends the schedule and waits for the relay's last answers: what it
    /// did, and the failures not yet taken.
    pub async fn finish(self) -> anyhow::Result<(Done, Vec<(usize, String)>)> {
        self.lines
            .send("end\n".to_owned())
            .map_err(|_| anyhow::anyhow!("the relay connection is closed"))?;
        let Self {
            mut failures, done, ..
        } = self;
        let done = done.await.context("the relay's reader is gone")??;
        // The relay answers `done` after its last failure.
        Ok((
            done,
            std::iter::from_fn(|| failures.try_recv().ok()).collect(),
        ))
    }
}

enum Answer {
    Failed(usize, String),
    Done(Done),
}

fn parse_answer(line: &str) -> anyhow::Result<Answer> {
    let mut fields = line.splitn(3, ' ');
    match (fields.next(), fields.next(), fields.next()) {
        (Some("err"), Some(i), reason) => Ok(Answer::Failed(
            i.parse().context("the failed change's number")?,
            reason.unwrap_or_default().to_owned(),
        )),
        (Some("done"), Some(written), Some(late)) => Ok(Answer::Done(Done {
            written: written.parse().context("WRITTEN")?,
            late: Duration::from_millis(late.parse().context("LATE_MS")?),
        })),
        _ => bail!("unexpected answer from the relay: {line:?}"),
    }
}
