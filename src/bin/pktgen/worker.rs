//! The pinned loops: transmit cores and the receiver. They share nothing with the reporting
//! thread but a few atomics, published every few hundred bursts; the per-burst path neither
//! allocates nor locks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rawpkt::{Burst, Pool, PoolConfig, Port, QueueConfig, TxQueue};

use crate::fail::Fail;
use crate::traffic::{read_stamp, Traffic};

/// Totals a worker publishes for the reporter.
#[derive(Default)]
pub struct Counters {
    /// Nanoseconds this worker spent sending (its start to its last burst).
    pub active_ns: AtomicU64,
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub drops: AtomicU64,
    pub errors: AtomicU64,
}

impl Counters {
    fn publish(&self, packets: u64, bytes: u64, drops: u64, errors: u64) {
        self.packets.store(packets, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.drops.store(drops, Ordering::Relaxed);
        self.errors.store(errors, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> [u64; 4] {
        [&self.packets, &self.bytes, &self.drops, &self.errors].map(|a| a.load(Ordering::Relaxed))
    }
}

/// What one transmit core does.
pub struct TxPlan {
    pub core: usize,
    pub cores: usize,
    pub cpu: Option<core_affinity::CoreId>,
    pub queues: u16,
    pub burst: usize,
    /// This core's share of the packets and of the rate.
    pub count: Option<u64>,
    pub rate: Option<f64>,
    pub deadline: Option<Instant>,
}

const PUBLISH_EVERY: u32 = 256;
/// Packets a receive burst takes at most.
const RX_BURST: usize = 256;
/// A send time no frame carries (they count nanoseconds from the start).
const NO_STAMP: u64 = u64::MAX;

fn totals<'a>(qs: impl Iterator<Item = &'a rawpkt::QueueStats>) -> (u64, u64, u64, u64) {
    qs.fold((0, 0, 0, 0), |(p, b, d, e), s| {
        (p + s.packets, b + s.bytes, d + s.drops, e + s.errors.total())
    })
}

/// A transmit core: its own pool and `queues` send queues, round robin per burst.
pub fn transmit(
    plan: TxPlan,
    port: Arc<Port>,
    traffic: Arc<Traffic>,
    epoch: Instant,
    stop: &AtomicBool,
    out: &Counters,
    inline_rx: Option<RxPlan>,
) -> Result<Option<Histogram<u64>>, Fail> {
    if let Some(cpu) = plan.cpu {
        if !core_affinity::set_for_current(cpu) {
            rawpkt::errln!(
                "pktgen: core {}: could not pin to CPU {}; running unpinned",
                plan.core,
                cpu.id
            );
        }
    }
    let mut receiver = inline_rx.map(Receiver::new).transpose()?;
    let qcfg = QueueConfig::default();
    let buffers = (u32::from(plan.queues) * qcfg.size * 2 + 4 * plan.burst as u32).next_power_of_two();
    let pool = Pool::new(PoolConfig {
        buffers,
        ..PoolConfig::default()
    })
    .map_err(|e| Fail::rawpkt(format_args!("core {}: packet pool", plan.core), e))?;
    if traffic.largest() > pool.data_room() as usize {
        return Err(Fail::Runtime(format!(
            "frames of {} bytes do not fit {}-byte buffers",
            traffic.largest(),
            pool.data_room()
        )));
    }
    let mut queues: Vec<Box<dyn TxQueue>> = (0..plan.queues)
        .map(|q| port.tx_queue((plan.core as u16) * plan.queues + q, &pool, &qcfg))
        .collect::<Result<_, _>>()
        .map_err(|e| Fail::rawpkt(port.spec(), e))?;
    let mut burst = Burst::new(&pool, plan.burst);
    let mut held = crate::traffic::Held::new(pool.capacity());
    // With one frame size `alloc` gives every packet its length; else each is set.
    let fixed_len = traffic.fixed_len();
    // Sequence numbers interleave across cores, so every packet's number is unique.
    let mut k = 0u64;
    let stride = plan.cores as u64;
    let limit = plan.count.unwrap_or(u64::MAX);
    let start = Instant::now();
    let mut rr = 0;
    let mut iter = 0u32;
    let mut cursor = crate::traffic::Cursor::default();
    let flags = traffic.tx_flags;
    loop {
        iter = iter.wrapping_add(1);
        // From the first iteration on: a Ctrl-C that came while the ports opened sends nothing.
        if iter % 64 == 1 && (stop.load(Ordering::Relaxed) || plan.deadline.is_some_and(|d| Instant::now() >= d)) {
            break;
        }
        // How many more this burst may add: the count limit, and the rate (credit since start).
        let mut want = plan.burst - burst.len();
        want = want.min((limit - k) as usize);
        if want > 0 {
            // One clock read per burst: the rate's credit and the send stamp of every packet.
            let now = Instant::now();
            if let Some(r) = plan.rate {
                // Packets made so far may not run ahead of rate × time since the start.
                let credit = ((now - start).as_secs_f64() * r) as u64;
                want = want.min(credit.saturating_sub(k) as usize);
            }
            let now_ns = (now - epoch).as_nanos() as u64;
            let have = burst.len();
            let got = burst.alloc(want, fixed_len.unwrap_or(traffic.largest()));
            for i in have..have + got {
                let seq = k * stride + plan.core as u64;
                if fixed_len.is_none() {
                    burst
                        .set_len(i, traffic.len_at(&cursor))
                        .map_err(|e| Fail::Runtime(format!("set_len: {e}")))?;
                }
                let tag = held.of(burst.packet(i).buffer_index());
                traffic.write(&mut cursor, tag, seq, now_ns, burst.data_mut(i));
                if flags != 0 {
                    burst.set_flags(i, flags);
                }
                k += 1;
            }
        }
        if !burst.is_empty() {
            queues[rr]
                .tx_burst(&mut burst)
                .map_err(|e| Fail::Runtime(format!("{}: {e}", port.spec())))?;
            rr = (rr + 1) % queues.len();
        } else {
            for q in queues.iter_mut() {
                q.reclaim()
                    .map_err(|e| Fail::Runtime(format!("{}: {e}", port.spec())))?;
            }
            if k >= limit {
                break;
            }
        }
        if let Some(r) = receiver.as_mut() {
            r.poll()?;
        }
        if iter % PUBLISH_EVERY == 0 {
            let (p, b, d, e) = totals(queues.iter().map(|q| q.stats()));
            out.publish(p, b, d, e);
        }
    }
    let sending_ns = start.elapsed().as_nanos() as u64;
    // Unsent packets go back to the pool; sent ones complete before the queues close.
    burst.clear();
    let give_up = Instant::now() + Duration::from_secs(2);
    while queues.iter().any(|q| q.in_flight() > 0) && Instant::now() < give_up {
        for q in queues.iter_mut() {
            let _ = q.reclaim();
        }
        if let Some(r) = receiver.as_mut() {
            r.poll()?;
        }
    }
    let (p, b, d, e) = totals(queues.iter().map(|q| q.stats()));
    out.publish(p, b, d, e);
    out.active_ns.store(sending_ns, Ordering::Relaxed);
    receiver.map(Receiver::finish).transpose()
}

pub type Capture = rawpkt::pcap::Writer<std::io::BufWriter<std::fs::File>>;

/// What a receiver is built from; it is built in the thread that polls it (pools are per core).
pub struct RxPlan {
    pub port: Arc<Port>,
    pub capture: Option<Capture>,
    pub counters: Arc<Counters>,
    pub epoch: Instant,
}

/// The receiver: counts, measures latency from the stamps, and captures. Polled by its own
/// thread when a CPU is free for it, else from the first transmit core's loop.
pub struct Receiver {
    port: Arc<Port>,
    rx: Box<dyn rawpkt::RxQueue>,
    got: Burst,
    hist: Histogram<u64>,
    capture: Option<Capture>,
    capture_error: Option<String>,
    counters: Arc<Counters>,
    epoch: Instant,
    /// Unix time of `epoch` in ns: captures are dated in wall-clock time, as pcap readers expect.
    unix_base_ns: u64,
    iter: u32,
}

impl Receiver {
    pub fn new(plan: RxPlan) -> Result<Receiver, Fail> {
        let qcfg = QueueConfig {
            size: 4096,
            ..QueueConfig::default()
        };
        let pool = Pool::new(PoolConfig {
            buffers: 16384,
            ..PoolConfig::default()
        })
        .map_err(|e| Fail::rawpkt("receiver: packet pool", e))?;
        let rx = plan
            .port
            .rx_queue(0, &pool, &qcfg)
            .map_err(|e| Fail::rawpkt(plan.port.spec(), e))?;
        Ok(Receiver {
            rx,
            got: Burst::new(&pool, RX_BURST),
            hist: Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| Fail::Runtime(e.to_string()))?,
            port: plan.port,
            capture: plan.capture,
            capture_error: None,
            counters: plan.counters,
            unix_base_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                .saturating_sub(plan.epoch.elapsed().as_nanos() as u64),
            epoch: plan.epoch,
            iter: 0,
        })
    }

    /// One receive burst; returns the packets it took.
    #[inline]
    pub fn poll(&mut self) -> Result<usize, Fail> {
        self.iter = self.iter.wrapping_add(1);
        let n = self
            .rx
            .rx_burst(&mut self.got)
            .map_err(|e| Fail::Runtime(format!("{}: {e}", self.port.spec())))?;
        if n > 0 {
            let now = self.epoch.elapsed().as_nanos() as u64;
            // The stamps first, in a loop that does nothing else: every frame is a cache miss
            // (the NIC just wrote it from the other core), and a short loop body lets the CPU
            // have many of them in flight at once.
            let count = self.got.len().min(RX_BURST);
            let mut sent = [NO_STAMP; RX_BURST];
            for (i, s) in sent[..count].iter_mut().enumerate() {
                if let Some((_, t)) = read_stamp(self.got.data(i)) {
                    *s = t;
                }
            }
            for &t in &sent[..count] {
                if t != NO_STAMP {
                    self.hist.saturating_record(now.saturating_sub(t).max(1));
                }
            }
            if let Some(w) = self.capture.as_mut() {
                for i in 0..self.got.len() {
                    if let Err(e) = w.write(self.unix_base_ns + now, self.got.data(i)) {
                        self.capture_error.get_or_insert(e.to_string());
                        break;
                    }
                }
                if self.capture_error.is_some() {
                    self.capture = None;
                }
            }
            self.got.clear();
        }
        if n == 0 || self.iter % PUBLISH_EVERY == 0 {
            let s = self.rx.stats();
            self.counters.publish(s.packets, s.bytes, s.drops, s.errors.total());
        }
        Ok(n)
    }

    /// After the senders stop: takes stragglers until the line has been quiet for 200 ms, for
    /// two seconds at most (a port with background traffic is never quiet), or until Ctrl-C.
    pub fn finish(mut self) -> Result<Histogram<u64>, Fail> {
        let mut quiet_since = Instant::now();
        let give_up = quiet_since + Duration::from_secs(2);
        let stop = rawpkt::stop_flag();
        while quiet_since.elapsed() < Duration::from_millis(200) && Instant::now() < give_up {
            if self.poll()? > 0 {
                quiet_since = Instant::now();
            }
            if stop.load(Ordering::Relaxed) && quiet_since.elapsed() > Duration::from_millis(50) {
                break;
            }
        }
        let s = self.rx.stats();
        self.counters.publish(s.packets, s.bytes, s.drops, s.errors.total());
        if let Some(mut w) = self.capture.take() {
            w.flush().map_err(|e| Fail::Runtime(e.to_string()))?;
        }
        match self.capture_error {
            Some(e) => Err(Fail::Runtime(format!("capture stopped: {e}"))),
            None => Ok(self.hist),
        }
    }
}

/// A receiver on its own thread: says when its queue exists (frames that arrive before it are
/// not ours to count), polls until the senders are done, then finishes.
pub fn receive(plan: RxPlan, tx_done: &AtomicBool, ready: &AtomicBool) -> Result<Histogram<u64>, Fail> {
    let r = Receiver::new(plan);
    ready.store(true, Ordering::Release);
    let mut r = r?;
    while !tx_done.load(Ordering::Relaxed) {
        r.poll()?;
    }
    r.finish()
}
